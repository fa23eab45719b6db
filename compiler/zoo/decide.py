"""The zoo's second phase, on a Dask worker: decide a chunk of distinct obligations.

Each obligation the zoo's models asked for (`compiler.zoo.task`, collecting) is decided
here once, whichever models share it, with the options `prover check` decides it with
(`compiler.proving.prove`: the store, the timeout, the solver; witnesses unlifted, as a
model run lifts only the refutation it reports). A `ProverError` is the answer in place
of a verdict, as in a model run; the models then read these answers as `known`.
"""

from __future__ import annotations

from typing import Any

from compiler.zoo.task import RunSettings
from prover.errors import ProverError
from prover.obligation import Obligation


class DecisionLost(ProverError):
    """The worker deciding an obligation died or timed out twice: no verdict (its sites
    are unknown, never a pass). A value the zoo hands its models, never raised: raised, it
    would be a tool bug."""

    def __init__(self, why: str, attempts: int = 2) -> None:
        super().__init__(why, attempts)
        self.why, self.attempts = why, attempts

    def __str__(self) -> str:
        return f"{self.why}; tried {self.attempts} time(s)"


def decide_chunk(obligations: list[Obligation], settings: RunSettings) -> dict[str, Any]:
    """Obligation hash -> its verdict (or the `ProverError` deciding it raised)."""
    from compiler.cli.check_run import check_solver, open_store
    from compiler.proving.prove import PREFETCHING_SOLVERS
    from prover.parallel import decide_chunk as decide

    solver = check_solver(settings.solver)
    store = open_store(
        settings.proofs, settings.proofs_mode, settings.proof_key_file, settings.recheck_budget_s
    )
    options = {
        "timeout_s": settings.timeout_s,
        "solver": solver,
        "store": store,
        "cross_check": False,
        "lift": False,
    }
    answers = decide(obligations, options, solver in PREFETCHING_SOLVERS)
    return {ob.hash: v for ob, v in zip(obligations, answers, strict=True)}


def answer_kind(v: Any) -> str:
    """How an obligation was answered: "decided", "served" (from the store) or "error"."""
    if isinstance(v, Exception):
        return "error"
    return "served" if getattr(v, "cached", False) else "decided"
