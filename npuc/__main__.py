"""`python -m npuc`: the `npuc` command (`compiler.cli.npuc`)."""

from compiler.cli.npuc import main

raise SystemExit(main())
