"""`python -m npuc`: the `npuc` command (`compiler.cli.npuc`)."""
