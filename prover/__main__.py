"""`python -m prover`: the `prover` command (its code lives in the app layer,
`compiler.cli.prover`; an entry point is no module anyone imports)."""

from compiler.cli.prover import main

raise SystemExit(main())
