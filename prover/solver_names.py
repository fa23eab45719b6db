"""The names `--solver` accepts, without importing the decision procedures themselves.

`prover.api.PROCEDURES` maps each of `PROCEDURE_NAMES` to its procedure (a test and an
import-time check keep the two in step).
"""

from __future__ import annotations

PROCEDURE_NAMES = ("segments", "enumerate", "bitwuzla", "z3", "cvc5")
ALIASES = {"enum": "enumerate"}
SOLVERS = ("auto", *PROCEDURE_NAMES, *ALIASES)  # every name `--solver` accepts
