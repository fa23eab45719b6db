"""Errors raised by the prover's decision procedures, store and API."""

from __future__ import annotations


class ProverError(Exception):
    """Base class of every prover error (never a verdict)."""


class VacuousObligation(ProverError):
    """No input satisfies the ranges and preconditions: the obligation proves nothing."""


class SolverDisagreement(ProverError):
    """Two decision procedures gave different answers on the same obligation (a tool bug)."""


class ReplayMismatch(ProverError):
    """A counterexample did not reproduce on concrete replay (a tool bug, never a refutation)."""


class NotApplicable(ProverError):
    """A decision procedure cannot handle this obligation (the portfolio tries the next one)."""


class StoreMiss(ProverError):
    """Read-only proof store has no record for an obligation, or none that can be trusted."""


class StoreCorrupt(ProverError):
    """A proof record whose content does not match its hash or digest, or that a re-decision contradicts."""


class LiftError(ProverError):
    """No input row of the compute op produces the requested accumulator value."""
