"""`python -m prover`: the `prover` command (its code lives in the app layer,
`compiler.cli.prover`; an entry point is no module anyone imports)."""

from compiler.cli.prover import main

if __name__ == "__main__":  # importing the module (e.g. to list its classes) runs nothing
    raise SystemExit(main())
