"""One zoo model run, on a Dask worker: `prover check` of one model x target x policy x
reference, through the same pipeline (`compiler.cli.check_run.run_pipeline`).

Run alone (`known` None), it decides its obligations itself: `prover check` exactly. The
zoo runs it with `known` (the verdicts decided so far, by hash) and `collect`: every other
obligation it asks for is deferred (`compiler.ir.context.CheckOptions.defer`), and if
there was one the result is `pending` with those obligations (`needs`, by hash) to be
decided apart (`compiler.zoo.decide`), once across the zoo, and the model run again with
them known. A run that needed nothing new is the check's result: its JSON report, its exit
code, and how each obligation it relied on was answered ("identity": a column family
proven in the model run, `prover.family`; "decided", "served" from the
proof store, or "error"). Bad input (a corrupt model) is a result (`status: error`, exit
2), not an exception: only a tool bug or a dead worker makes a run fail, and the zoo
retries those once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from compiler.frontend.cache import FrontendCache
from compiler.zoo.manifest import TaskSpec

# a worker collects a model, then assembles it (on the same worker where it can): the file
# checked and read by the frontend once (the ORT session behind the frontend's reading is
# cached by the frontend itself)
FRONTEND = FrontendCache()


@dataclass(frozen=True)
class RunSettings:
    """The options every task of a zoo run shares (the command line's check options)."""

    proofs: str | None = None
    proofs_mode: str | None = None
    proof_key_file: str | None = None
    recheck_budget_s: float | None = None
    timeout_s: float = 10.0
    solver: str = "auto"
    synthesis: bool = True
    schedule_strategy: str = "early"
    require_quantized: bool = False  # --require-quantized (always on in a read-only gate)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def run_task(
    spec: TaskSpec,
    settings: RunSettings,
    known: Mapping[str, Any] | None = None,
    collect: bool = False,
) -> dict[str, Any]:
    """Check one task (with the verdicts `known`; deferring the rest if `collect`); see
    the module docstring for what is returned."""
    from compiler.cli.check_run import CheckOptions, run_pipeline
    from compiler.cli.common import expected_errors, one_line
    from compiler.report.json_form import report_json
    from compiler.report.model import ExitCode
    from prover.errors import StoreMiss
    from prover.policy import Policy

    t0 = time.perf_counter()
    needs: dict[str, Any] | None = {} if collect else None
    opts = CheckOptions(
        policy=Policy.parse(spec.policy),
        target=spec.target,
        proofs=settings.proofs,
        proofs_mode=settings.proofs_mode,
        proof_key_file=settings.proof_key_file,
        recheck_budget_s=settings.recheck_budget_s,
        timeout_s=settings.timeout_s,
        solver=settings.solver,
        jobs=1,  # the zoo's parallelism is its workers
        progress=False,
        reference=spec.reference,
        schedule_strategy=settings.schedule_strategy,
        synthesis=settings.synthesis,
        require_quantized=settings.require_quantized,
        known=known,
        defer=needs,
        frontend_cache=FRONTEND if collect else None,
    )
    try:
        run = run_pipeline(spec.model, opts)
    except Exception as e:
        if needs:  # perhaps only on the provisional path: run again with the verdicts
            return _pending(needs, t0)
        if isinstance(e, StoreMiss):
            return _failed(spec, t0, ExitCode.PROOF_MISSING, one_line(e))
        if isinstance(e, expected_errors()):
            return _failed(spec, t0, ExitCode.BAD_INPUT, one_line(e))
        raise
    if needs:
        return _pending(needs, t0)
    ctx = run.result.context
    run.report.model = spec.label
    verdicts = {} if ctx is None else ctx.verdicts
    return {
        "status": "checked",
        "exit_code": int(run.report.exit_code()),
        "report": report_json(run.report),
        "obligations": {h: _answer(v) for h, v in verdicts.items()},
        "time_s": time.perf_counter() - t0,
    }


def _pending(needs: dict[str, Any], t0: float) -> dict[str, Any]:
    return {"status": "pending", "needs": needs, "time_s": time.perf_counter() - t0}


def _answer(v: Any) -> str:
    if isinstance(v, Exception):
        return "error"
    if getattr(v, "solver", "") == "identity":  # a family of identities, proven in the run
        return "identity"
    return "served" if getattr(v, "cached", False) else "decided"


def _failed(spec: TaskSpec, t0: float, code: int, why: str) -> dict[str, Any]:
    return {
        "status": "error",
        "exit_code": int(code),
        "reason": why,
        "obligations": {},
        "time_s": time.perf_counter() - t0,
    }
