"""Errors raised by the prover's decision procedures, store and API.

`BadInput` is the one base class of every error that means "the user's input is
wrong" (a model, target, program, option, kernel parameter or proof store): the
command-line tools turn it into a one-line message and exit code 2. It lives here
because `prover` is the bottom of the dependency graph, so every package can derive
from it. An error that is not a `BadInput` (and not `StoreMiss`) is a tool bug.
"""

from __future__ import annotations


class BadInput(Exception):
    """Base class of every bad-input error (exit code 2), never a tool bug."""


class ProverError(Exception):
    """Base class of every prover error (never a verdict)."""


class VacuousObligation(ProverError, BadInput):
    """No input satisfies the ranges and preconditions: the obligation proves nothing."""


class SolverDisagreement(ProverError):
    """Two decision procedures gave different answers on the same obligation (a tool bug)."""


class ReplayMismatch(ProverError):
    """A counterexample did not reproduce on concrete replay (a tool bug, never a refutation)."""


class NotApplicable(ProverError):
    """A decision procedure cannot handle this obligation (the portfolio tries the next one)."""


class StoreMiss(ProverError):
    """Read-only proof store has no record for an obligation, or none that can be trusted.

    Not a `BadInput`: a read-only gate miss has its own exit code (5)."""


class StoreCorrupt(ProverError, BadInput):
    """A proof record whose content does not match its hash or digest, or that a re-decision contradicts."""


class LiftError(ProverError):
    """No input row of the compute op produces the requested accumulator value."""
