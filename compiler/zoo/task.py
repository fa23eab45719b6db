"""One zoo task, run on a Dask worker: `prover check` of one model x target x policy x
reference, through the same pipeline (`compiler.cli.check_run.run_pipeline`).

It returns plain data (picklable, JSON-ready): the check's JSON report, its exit code,
and how each obligation was answered ("decided", "served" from the shared proof store,
or "error"), which the zoo adds up into its deduplication figures. Bad input (a corrupt
model) is a result (`status: error`, exit 2), not an exception: only a tool bug or a dead
worker makes the task fail, and the zoo retries those once.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from compiler.zoo.manifest import TaskSpec


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


def run_task(spec: TaskSpec, settings: RunSettings) -> dict[str, Any]:
    """Check one task; see the module docstring for what is returned."""
    from compiler.cli.check_run import CheckOptions, run_pipeline
    from compiler.cli.common import expected_errors, one_line
    from compiler.report.json_form import report_json
    from compiler.report.model import ExitCode
    from prover.errors import StoreMiss
    from prover.policy import Policy

    t0 = time.perf_counter()
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
    )
    try:
        run = run_pipeline(spec.model, opts)
    except StoreMiss as e:
        return _failed(spec, t0, ExitCode.PROOF_MISSING, one_line(e))
    except expected_errors() as e:
        return _failed(spec, t0, ExitCode.BAD_INPUT, one_line(e))
    run.report.model = spec.label
    verdicts = {} if run.result.context is None else run.result.context.verdicts
    return {
        "status": "checked",
        "exit_code": int(run.report.exit_code()),
        "report": report_json(run.report),
        "obligations": {h: _answer(v) for h, v in verdicts.items()},
        "time_s": time.perf_counter() - t0,
    }


def _answer(v: Any) -> str:
    if isinstance(v, Exception):
        return "error"
    return "served" if getattr(v, "cached", False) else "decided"


def _failed(spec: TaskSpec, t0: float, code: int, why: str) -> dict[str, Any]:
    return {
        "status": "error",
        "exit_code": int(code),
        "reason": why,
        "obligations": {},
        "time_s": time.perf_counter() - t0,
    }
