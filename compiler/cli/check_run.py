"""Run the compiler's pipeline for `prover check` / `npuc compile` and build a `Report`.

This is the one place that touches `compiler.api.compile_model` and the proof
store for the command-line tools; the report writers only see `compiler.report.model`
(sites as `SiteReport.of(site)`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compiler.cli.common import UsageError, check_model_file, resolve_target, tool_version
from compiler.cli.inputs_read import InputsRead
from compiler.ir.site import Diagnostic
from compiler.phases import phase
from compiler.report.model import Report, SiteReport
from compiler.report.progress import Progress
from compiler.report.words import plural
from prover.verdict import Status

if TYPE_CHECKING:
    from compiler.api import CompileResult
    from compiler.frontend.checked import CheckedModel


@dataclass(kw_only=True)
class CheckOptions:
    """Options of one check run (the command-line flags, parsed)."""

    policy: Any = None  # prover.policy.Policy; None = bitwise
    target: str | None = None
    proofs: str | None = None  # no store unless the user names one
    proofs_mode: str | None = None  # None: rw with a store, else off
    proof_key_file: str | None = None  # else env NPUFUSION_PROOF_KEY
    recheck_budget_s: float | None = None  # None: the store's default
    timeout_s: float = 10.0
    solver: str = "auto"
    jobs: int = 1
    progress: bool = True
    reference: str = "onnx"  # a prover.reference profile name, or "ort-host"
    schedule_strategy: str = "early"  # --schedule-strategy (compiler.ir.structure)
    synthesis: bool = True  # --no-synthesize turns it off (compiler.proving.fixed_synthesis)
    require_quantized: bool = False  # --require-quantized (always on in a read-only gate)
    # `prover zoo` (compiler.zoo): verdicts decided apart, and collecting without deciding
    known: Mapping[str, Any] | None = None
    defer: MutableMapping[str, Any] | None = None
    # a process checking the same files again (a zoo worker): compiler.frontend.cache
    frontend_cache: Any = None

    @classmethod
    def from_args(cls, args: Any) -> CheckOptions:
        """The options of a parsed `prover check` / `npuc compile` command line."""
        return cls(
            policy=args.policy,
            target=args.target,
            proofs=args.proofs,
            proofs_mode=args.proofs_mode,
            proof_key_file=args.proof_key_file,
            recheck_budget_s=args.recheck_budget,
            timeout_s=args.timeout,
            solver=args.solver,
            jobs=getattr(args, "jobs", 1),  # `npuc compile` has no --jobs
            progress=not args.no_progress,
            reference=args.reference,
            schedule_strategy=args.schedule_strategy,
            synthesis=args.synthesize,
            require_quantized=getattr(args, "require_quantized", False),
        )


@dataclass
class CheckRun:
    """Everything a run produced: the report and the compiler's own result."""

    report: Report
    result: CompileResult
    target: Any
    policy: Any
    missing_proofs: list[str]
    store: Any = None
    external_data: list[str] = field(default_factory=list)  # side files the model names
    inputs: InputsRead = field(default_factory=InputsRead)  # digests of the bytes read


def open_store(
    directory: str | None,
    mode: str | None,
    key_file: str | None = None,
    recheck_budget_s: float | None = None,
) -> Any:
    """The proof store named by `--proofs`/`--proofs-mode`; None when there is none.

    Without a directory nothing is read or written (mode off); naming `rw`/`ro`
    without one is bad input, as is `ro` on a missing directory. The signing key
    comes from `key_file`, else env NPUFUSION_PROOF_KEY.
    """
    if mode is None:
        mode = "off" if directory is None else "rw"
    if mode == "off":
        return None
    if directory is None:
        raise UsageError(f"--proofs-mode {mode} needs a store: add --proofs DIR")
    p = Path(directory)
    if p.exists() and not p.is_dir():
        raise UsageError(f"--proofs is not a directory: {directory}")
    if mode == "ro" and not p.is_dir():
        raise UsageError(f"proof store not found (--proofs-mode ro): {directory}")
    from prover.proofstore import ProofStore
    from prover.trust import DEFAULT_RECHECK_BUDGET_S, resolve_key

    if key_file is not None and not Path(key_file).is_file():
        raise UsageError(f"proof key file not found: {key_file}")
    try:
        key = resolve_key(key_file)
    except ValueError as e:
        raise UsageError(str(e)) from None
    budget = DEFAULT_RECHECK_BUDGET_S if recheck_budget_s is None else recheck_budget_s
    return ProofStore(p, mode=mode, key=key, recheck_budget_s=budget)


def check_solver(name: str) -> str:
    """Validate a --solver name (aliases allowed) against the prover's procedures."""
    from prover.api import solver_name

    try:
        return solver_name(name)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _compile(
    model: CheckedModel, policy: Any, target: Any, check_options: dict, progress: Progress
) -> CompileResult:
    from compiler.api import compile_model

    return compile_model(
        model, policy=policy, target=target, check_options=check_options, progress=progress.update
    )


def run_pipeline(model: str, opts: CheckOptions) -> CheckRun:
    """Validate every input first (nothing touches the store before), then compile."""
    from prover.policy import Policy

    policy = opts.policy if opts.policy is not None else Policy.parse("bitwise")
    solver = check_solver(opts.solver)
    external: list[str] = []
    read = InputsRead()
    with phase("load"):
        checked = _checked_model(model, external, read, opts.frontend_cache)
    target = resolve_target(opts.target, read)
    profile = resolve_reference_option(opts.reference)
    store = open_store(opts.proofs, opts.proofs_mode, opts.proof_key_file, opts.recheck_budget_s)
    check_options: dict[str, Any] = {
        "timeout_s": opts.timeout_s,
        "solver": solver,
        "jobs": opts.jobs,
        "reference": profile,
        "schedule_strategy": opts.schedule_strategy,
        "synthesis": opts.synthesis,
    }
    if store is not None:
        check_options["store"] = store
    if opts.known is not None or opts.defer is not None:
        check_options.update(known=opts.known, defer=opts.defer)
    if opts.frontend_cache is not None and read.model is not None and not external:
        check_options["frontend"] = (opts.frontend_cache, read.model, checked.proto.ByteSize())
    with Progress("checking", enabled=None if opts.progress else False) as bar:
        result = _compile(checked, policy, target, check_options, bar)
    with phase("report"):
        report = Report(
            model=model,
            policy=str(policy),
            target=str(getattr(target, "name", opts.target or "default")),
            sites=[SiteReport.of(s) for s in result.sites],
            tool_version=tool_version(),
            reference=profile.to_dict(),
            findings=list(result.context.findings) if result.context is not None else [],
            host_ops=host_ops(result),
            require_quantized=opts.require_quantized or opts.proofs_mode == "ro",
            macs=mac_counts(result),
        )
        misses = missing_proofs(result, store)
        report.proof_misses = [why for _, why in misses]
        report.proof_records = served_records(result)
    return CheckRun(report, result, target, policy, [h for h, _ in misses], store, external, read)


def _checked_model(model: str, external: list[str], read: InputsRead, cache: Any) -> Any:
    """`check_model_file`, served from `cache` (a `FrontendCache`) for a file whose bytes
    were checked before in this process (and that names no external data)."""
    if cache is None:
        return check_model_file(model, external, read)
    from hashlib import sha256

    try:
        data = Path(model).read_bytes()
    except OSError:
        return check_model_file(model, external, read)
    key = ("checked", str(Path(model).absolute()), sha256(data).hexdigest())
    hit = cache.get(key)
    if hit is not None:
        checked, read.model = hit
        return checked
    checked = check_model_file(model, external, read)
    if not external:
        cache.put(key, (checked, read.model), len(data))
    return checked


def host_ops(result: CompileResult) -> list[Diagnostic]:
    """Every op kept on the host, with its reason code and action (not the sites' reasons).

    The frontend's placements (`unsupported_op`) and the lowering's (an op whose NPU form
    was not proven or does not fit the target); site diagnostics are reported per site.
    """
    from compiler.ort.host import host_diagnostics

    diags = host_diagnostics(result.original) if result.original is not None else []
    if result.context is not None:
        diags += list(result.context.diagnostics)
    out: list[Diagnostic] = []
    seen = set()
    for d in diags:
        key = (d.code, tuple(d.nodes), d.message)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


HOST_MATMULS = ("MatMul", "Gemm", "MatMulInteger", "QLinearMatMul", "QGemm")


def mac_counts(result: CompileResult) -> dict[str, int] | None:
    """Multiply-accumulates of the model's matmul ops at their static shapes (a symbolic
    dim counts 1): in total (host-placed MatMul/Gemm groups included) and those lowered
    to an NPU MatMul; None without a lowering."""
    if result.original is None or result.lowered is None:
        return None
    from npu_backend.lowered import NpuMatMul

    on_npu = {n for s in result.lowered.steps if isinstance(s, NpuMatMul) for n in s.onnx_nodes}
    g = result.original
    total = npu = 0
    for node in g.nodes:
        host_mm = node.op == "host_onnx" and node.attrs.get("compute") in HOST_MATMULS
        if not (node.op in ("matmul", "matmul_act") or host_mm) or not node.inputs:
            continue
        if node.inputs[0] not in g.values or node.output not in g.values:
            continue
        a, out = g.values[node.inputs[0]].shape, g.values[node.output].shape
        if not a or not out:
            continue
        n = a[-1] if isinstance(a[-1], int) else 1
        for d in out:
            n *= d if isinstance(d, int) and d > 0 else 1
        total += n
        if node.name in on_npu:
            npu += n
    return {"total": total, "npu": npu}


def resolve_reference_option(name: str) -> Any:
    """The `ReferenceProfile` a --reference value names (bad names are bad usage)."""
    from compiler.ort.reference_host import resolve_reference

    try:
        return resolve_reference(name)
    except ValueError as e:
        raise UsageError(f"--reference: {e}") from None


def _verdicts(result: CompileResult) -> dict[str, Any]:
    """Obligation hash -> the prover's Verdict (or the error deciding it raised)."""
    return {} if result.context is None else dict(result.context.verdicts)


def missing_proofs(result: CompileResult, store: Any) -> list[tuple[str, str]]:
    """In `ro` mode: (hash, why) of every obligation the report relies on that was checked
    without a trusted record (`unrelied_obligations` are not asked for)."""
    from prover.errors import StoreMiss

    if store is None or getattr(store, "mode", None) != "ro":
        return []
    skip = unrelied_obligations(result)
    out = []
    for h, v in _verdicts(result).items():
        if h in skip:
            continue
        if isinstance(v, StoreMiss):
            out.append((h, str(v)))
        elif not isinstance(v, Exception) and not getattr(v, "cached", False):
            out.append((h, f"no proof record for obligation {h} in {store.root}"))
    return out


def unrelied_obligations(result: CompileResult) -> set[str]:
    """Obligations no reported verdict depends on: the other column groups of a refuted
    site (its verdict rests on the one refutation it reports, replayed; the others are
    neither lifted nor stored) and those of `Site.unrelied` (rounded parameters a proven
    synthesised group replaced, ...), unless another site relies on the same obligation."""
    relied: set[str] = set()
    others: set[str] = set()
    for s in result.sites:
        others.update(s.unrelied)
        if s.verdict == Status.REFUTED and s.obligation_hash is not None:
            relied.add(s.obligation_hash)
            others.update(h for h in s.obligations if h != s.obligation_hash)
        else:
            relied.update(h for h in s.obligations if h not in s.unrelied)
    return others - relied


def served_records(result: CompileResult) -> list[dict[str, str]]:
    """For each obligation answered from the store: its record and how it was checked."""
    out = []
    for h, v in _verdicts(result).items():
        details = getattr(v, "details", None) or {}
        if getattr(v, "cached", False) and "served" in details:
            out.append(
                {"obligation": h, "record": str(details["record"]), "served": details["served"]}
            )
    return out


def print_store_summary(prog: str, run: CheckRun, model: str) -> list[str]:
    """On stderr: how each served record was checked, and the gate's verdict (ro mode);
    returns the lines printed."""
    lines = store_summary(prog, run, model)
    for line in lines:
        print(line, file=sys.stderr)
    return lines


def store_summary(prog: str, run: CheckRun, model: str) -> list[str]:
    """The lines `print_store_summary` prints."""
    if run.store is None:
        return []
    lines = [f"{prog}: proof record {r['record']}: {r['served']}" for r in run.report.proof_records]
    misses = run.report.proof_misses
    if misses:
        code = int(run.report.exit_code())
        why = "" if code == 5 else ": a refuted site takes precedence"
        lines.append(
            f"{prog}: proof gate failed (exit {code}{why}): "
            f"{plural(len(misses), 'obligation')} without a trusted record in "
            f"{run.store.root}; first: {misses[0]}; record them with: prover check {model} "
            f"--proofs {run.store.root} (rw), then commit the new records"
        )
    return lines


def relied_on_records(run: CheckRun) -> list[tuple[Path, bytes]] | None:
    """The store's record files of every obligation this run decided or served, each read
    once, with its bytes; None if one no longer holds the verdict the run reports (another
    process rewrote it: a run record must not answer for a store that changed under it)."""
    if run.store is None:
        return []
    out = []
    for h, v in _verdicts(run.result).items():
        p = run.store.path(h)
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            continue  # never stored: a refutation the report does not rely on (unlifted)
        except OSError:
            return None
        try:
            rec = json.loads(data)["verdict"]
            same = (rec["status"], rec["max_diff"]) == (str(v.status), v.max_diff)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None  # unreadable now, or an error in place of the verdict
        if not same:
            return None
        out.append((p, data))
    return out


def complete(run: CheckRun) -> bool:
    """Whether every obligation was decided (no error in place of a verdict, nothing
    unknown, no gate miss): a run whose report may be served again unchanged."""
    s = run.report.summary
    return (
        not s.unknown
        and not run.report.proof_misses
        and not any(isinstance(v, Exception) for v in _verdicts(run.result).values())
    )
