"""`python -m npuc`: the `npuc` command (`compiler.cli.npuc`)."""

from compiler.cli.npuc import main

if __name__ == "__main__":  # importing the module (e.g. to list its classes) runs nothing
    raise SystemExit(main())
