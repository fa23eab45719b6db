"""Run the compiler's pipeline for `prover check` / `npuc compile` and build a `Report`.

This is the one place that touches `compiler.api.compile_model` and the proof
store for the command-line tools; the report writers only see `report_model`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.cli_common import UsageError, check_model_file, resolve_target, tool_version
from compiler.progress import Progress
from compiler.report_model import Counterexample, Reason, Report, SiteReport, arrays


@dataclass
class CheckOptions:
    """Options of one check run (the command-line flags, parsed)."""

    policy: Any = None  # prover.policy.Policy; None = bitwise
    target: str | None = None
    proofs: str | None = "proofs"
    proofs_mode: str = "rw"
    timeout_s: float = 10.0
    solver: str = "auto"
    jobs: int = 1
    progress: bool = True
    reference: str = "onnx"  # a prover.reference profile name, or "ort-host"

    @classmethod
    def from_args(cls, args: Any) -> CheckOptions:
        """The options of a parsed `prover check` / `npuc compile` command line."""
        return cls(
            policy=args.policy,
            target=args.target,
            proofs=args.proofs,
            proofs_mode=args.proofs_mode,
            timeout_s=args.timeout,
            solver=args.solver,
            jobs=getattr(args, "jobs", 1),
            progress=not args.no_progress,
            reference=getattr(args, "reference", None) or "onnx",
        )


@dataclass
class CheckRun:
    """Everything a run produced: the report and the compiler's own result."""

    report: Report
    result: Any
    target: Any
    policy: Any
    missing_proofs: list[str]


def open_store(directory: str | None, mode: str) -> Any:
    """The proof store for `mode` ("rw", "ro", "off"); None when off.

    `ro` on a missing directory is bad input (the committed store is absent).
    """
    if mode == "off" or directory is None:
        return None
    p = Path(directory)
    if p.exists() and not p.is_dir():
        raise UsageError(f"--proofs is not a directory: {directory}")
    if mode == "ro" and not p.is_dir():
        raise UsageError(f"proof store not found (--proofs-mode ro): {directory}")
    from prover.proofstore import ProofStore

    return ProofStore(p, mode=mode)


def check_solver(name: str) -> str:
    """Validate a --solver name against the prover's procedures."""
    from prover.api import PROCEDURES

    if name != "auto" and name not in PROCEDURES:
        raise UsageError(f"unknown solver {name!r}; known: auto, {', '.join(PROCEDURES)}")
    return name


def _field(obj: Any, name: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _reason(site: Any) -> Reason | None:
    r = _field(site, "reason")
    if r is None:
        return None
    if isinstance(r, Reason):
        return r
    if isinstance(r, tuple | list) and len(r) == 2:
        return Reason(str(r[0]), str(r[1]))
    code = _field(r, "code")
    if code is None:
        return None
    return Reason(str(code), str(_field(r, "message", "")))


def _counterexample(site: Any) -> Counterexample | None:
    c = _field(site, "counterexample")
    if c is None:
        return None
    local = _field(c, "assignment") or _field(c, "local") or {}
    return Counterexample(
        inputs=arrays(_field(c, "inputs")),
        expected=arrays(_field(c, "expected")),
        actual=arrays(_field(c, "actual")),
        local={str(k): int(v) for k, v in dict(local).items()},
        before=_int_or_none(_field(c, "before")),
        after=_int_or_none(_field(c, "after")),
    )


def _int_or_none(v: Any) -> int | None:
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None


def site_report(site: Any) -> SiteReport:
    """A compiler `Site` as a `SiteReport`."""
    verdict = _field(site, "verdict")
    verdict = getattr(verdict, "value", verdict)
    return SiteReport(
        id=str(_field(site, "id")),
        pattern=str(_field(site, "pattern")),
        nodes=tuple(str(n) for n in _field(site, "nodes", ())),
        verdict=str(verdict),
        reason=_reason(site),
        time_ms=float(_field(site, "time_ms", 0.0) or 0.0),
        counterexample=_counterexample(site),
        obligation_hash=_field(site, "obligation_hash"),
        solver=_field(site, "solver"),
        max_diff=_int_or_none(_field(site, "max_diff")),
        ledger=_field(site, "ledger"),
    )


def _call_compile(model: str, policy: Any, target: Any, check_options: dict, progress: Progress):
    from compiler.api import compile_model

    params = inspect.signature(compile_model).parameters
    kwargs: dict[str, Any] = {"policy": policy, "target": target, "check_options": check_options}
    if "progress" in params:
        kwargs["progress"] = progress.update
    return compile_model(model, **kwargs)


def run_pipeline(model: str, opts: CheckOptions) -> CheckRun:
    """Validate every input first (nothing touches the store before), then compile."""
    from prover.policy import Policy

    policy = opts.policy if opts.policy is not None else Policy.parse("bitwise")
    check_solver(opts.solver)
    check_model_file(model)
    target = resolve_target(opts.target)
    profile = resolve_reference_option(opts.reference)
    store = open_store(opts.proofs, opts.proofs_mode)
    check_options: dict[str, Any] = {
        "timeout_s": opts.timeout_s,
        "solver": opts.solver,
        "jobs": opts.jobs,
        "reference": profile,
    }
    if store is not None:
        check_options["store"] = store
    with Progress("checking", enabled=None if opts.progress else False) as bar:
        result = _call_compile(model, policy, target, check_options, bar)
    report = Report(
        model=model,
        policy=str(policy),
        target=str(getattr(target, "name", opts.target or "default")),
        sites=[site_report(s) for s in result.sites],
        tool_version=tool_version(),
        reference=profile.to_dict(),
        findings=list(getattr(getattr(result, "context", None), "findings", None) or []),
    )
    return CheckRun(report, result, target, policy, missing_proofs(result, store))


def resolve_reference_option(name: str) -> Any:
    """The `ReferenceProfile` a --reference value names (bad names are bad usage)."""
    from compiler.reference_host import resolve_reference

    try:
        return resolve_reference(name)
    except ValueError as e:
        raise UsageError(f"--reference: {e}") from None


def missing_proofs(result: Any, store: Any) -> list[str]:
    """In `ro` mode: hashes of every obligation checked that has no record in the store."""
    if store is None or getattr(store, "mode", None) != "ro":
        return []
    ctx = getattr(result, "context", None)
    hashes = sorted(getattr(ctx, "verdicts", {}) or {})
    return [h for h in hashes if not store.path(h).exists()]
