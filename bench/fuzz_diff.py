"""Differential fuzzer: random quantized models, the checker's verdicts vs ONNX Runtime.

    python3 -m bench.fuzz_diff --models 1000 --seed 0 [--out DIR] [--timeout S]

For every generated model (`fuzz_gen.py`): compile it in process (`compiler.api.
compile_model`, the same pipeline `prover check` and `npuc compile` run, proof store
off), generate the NPU program (`npu_backend.codegen.generate`), run it on the
simulator on random, extreme and half-step inputs (`fuzz_inputs.py`) and compare every
NPU step's output and every graph output with ONNX Runtime (`fuzz_ref.py`) at the
optimisation level the reference profile names, and counts where the two levels differ.

Failures (exit 1, one reproducer directory each under --out):
- `false_proof`: an NPU step implementing a proven site differs from ORT beyond the policy;
- `npu_mismatch`: another NPU-placed op (a lowering) differs beyond the policy;
- `host_mismatch`: a host step differs from ORT given equal inputs;
- `bound_propagation`: every step within the policy, the graph output not;
- `output_mismatch`: a graph output differs and no step explains it;
- `refutation_not_reproduced`: a refuted site whose counterexample does not replay;
- `crash`: compile, codegen or simulation raised an internal error (exit 4 in the CLI);
- `fuzzer_error`: the fuzzer's own reference is inconsistent (a bug here, not in the tool).
Not failures, counted: `rejected` (the frontend said exit 2; grouped by message),
`ort_rejects` (ONNX Runtime cannot run a model the frontend accepts), `ort_levels_differ`
(ORT's default optimisation level and level off give different outputs: its QDQ
transformers run integer kernels), `ort_default_fails` / `ort_off_fails` (ORT breaks the
model at that level), `host_reference_divergence` (this CPU's ORT differs from the checked
reference profile in that step: u8s8 pair saturation, or the MLAS FMA logistic/tanh),
`reference_undefined` (a Requantize precondition fails on the input).

The reference is ORT at the level the checked profile names (`--reference`, default
`onnx`): the default level where QDQ groups are read the integer way (what ORT's QDQ
transformers make of them), level off for the `*-qdq-float` profiles.
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fuzz_gen as G  # noqa: E402
import fuzz_inputs as I  # noqa: E402
import fuzz_ref as R  # noqa: E402

FAILURES = (
    "false_proof",
    "npu_mismatch",
    "host_mismatch",
    "bound_propagation",
    "output_mismatch",
    "refutation_not_reproduced",
    "crash",
    "fuzzer_error",
)
INFO = (
    "host_reference_divergence",
    "ort_rejects",
    "ort_levels_differ",
    "ort_default_fails",
    "ort_off_fails",
    "reference_undefined",
    "refutation_not_lifted",
)

# more `compile_model` keywords for every model (--compose-tables, --schedule-strategy)
EXTRA_COMPILE: dict[str, Any] = {}


@dataclass
class Finding:
    """One observation about one model: a failure category or an informational one."""

    category: str
    detail: str
    feeds: dict[str, np.ndarray] | None = None
    where: str = ""  # the area of the code the finding points at

    @property
    def failure(self) -> bool:
        return self.category in FAILURES


@dataclass
class ModelResult:
    """What happened to one generated model."""

    index: int
    spec: dict[str, Any]
    tags: set[str]
    status: str = "checked"  # checked | rejected | crash | skipped
    verdicts: Counter = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    reject_reason: str = ""
    seconds: float = 0.0
    reproducers: list[str] = field(default_factory=list)


def tags(spec: dict[str, Any]) -> set[str]:
    """Feature tags of a spec (the rows of the summary table and the test's exclusions)."""
    t = {f"compute:{spec['compute']}", f"target:{spec['target']}", f"policy:{spec['policy']}"}
    t.add(f"opset:{spec['opset']}")
    if spec["compute"] != "none":
        pair = {"uint8": "u8", "int8": "s8"}
        t.add(f"{pair[spec['a_type']]}{pair[spec['w_type']]}")
        if spec["compute"] == "qlinear" and ("s8u8" in t or spec["y_type"] != spec["a_type"]):
            t.add("ort_no_kernel")  # ORT's QLinearMatMul: u8u8u8, u8s8u8, s8s8s8 only
        if spec["per_column"]:
            t.add("per_column")
        lo, hi = G.RANGE[spec["a_type"]]
        if spec["a_zp"] in (lo, hi):
            t.add("extreme_zp")
    if spec.get("requantize"):
        t.add(f"requantize:{spec['requantize']['rounding']}")
    if spec.get("raw_int32"):
        t.add("raw_int32")
    if spec.get("float_input"):
        t.add("float_input")
        if spec["float_input"]["output_dtype"]:
            t.add("output_dtype")
    if spec.get("qdq_op") == "Gemm":
        t.add("qdq_gemm")
    if spec.get("clip"):
        t.add("clip")
    if spec.get("island"):
        t.add(f"island:{spec['island']['kind']}")
    if spec.get("reshape_unit"):
        t.add("reshape_unit")
    acts = spec.get("acts", [])
    if len(acts) >= 2:
        t.add("chained_acts")
    for a in acts:
        t.add(f"act:{a['kind']}")
        if a.get("f16"):
            t.add("f16_scales")
        if a.get("output_dtype"):
            t.add("output_dtype")
        elif a.get("omit_zp"):
            t.add("qdq_no_zp")
    return t


def _group(msg: str) -> str:
    """A rejection message with names and numbers blanked, to group similar ones."""
    s = re.sub(r"'[^']*'", "'_'", msg)
    s = re.sub(r"\[[^\]]*\]", "[_]", s)
    s = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "N", s)
    return s[:110]


def _diff(a: np.ndarray, b: np.ndarray) -> int | None:
    """max |a - b| as integers (None when the element counts differ)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.size != b.size:
        return None
    if a.size == 0:
        return 0
    return int(np.max(np.abs(a.reshape(-1).astype(np.int64) - b.reshape(-1).astype(np.int64))))


def simulate(program: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run a program on the simulator; every tensor it wrote (sram, then dram) by name."""
    from npu_backend import simulator

    trace = simulator.execute(program, feeds)
    env = dict(trace.memory["sram"])
    env.update(trace.memory["dram"])
    return env


def _step_io(step: Any) -> tuple[list[str], list[str]]:
    if hasattr(step, "outputs"):
        return list(step.inputs), list(step.outputs)
    if hasattr(step, "inputs"):
        return list(step.inputs), [step.out]
    return [getattr(step, "a", None) or step.x], [step.out]


class Checker:
    """Compiles and compares one model; holds what the comparison needs."""

    def __init__(
        self, spec: dict[str, Any], model: Any, timeout_s: float, reference: str = "onnx"
    ) -> None:
        from compiler.cli.common import resolve_target
        from prover.policy import Policy

        self.spec, self.model = spec, model
        self.policy = Policy.parse(spec["policy"])
        self.target = resolve_target(spec["target"])
        self.timeout_s = timeout_s
        self.reference = reference
        # the level whose results the checked profile names: ORT's default level where QDQ
        # groups are read the integer way (as ORT's QDQ transformers rewrite them), else off
        reading = str(getattr(R.profiles(reference)[0], "qdq_reading", "float"))
        self.level = "default" if reading == "integer" else "off"
        self.ref = R.OrtReference(model)
        self.project = G.uses_project_domain(model)
        self.result: Any = None
        self.program: Any = None

    def compile(self) -> None:
        """`compile_model` (proof store off) and codegen; errors propagate to the caller."""
        from compiler.api import compile_model
        from npu_backend.codegen import generate

        kw: dict[str, Any] = {"timeout_s": self.timeout_s, "proofs_mode": "off"}
        if "reference" in inspect.signature(compile_model).parameters:
            kw["reference"] = self.reference
        kw.update(EXTRA_COMPILE)
        self.result = compile_model(self.model, self.policy, self.target, **kw)
        self.program = generate(self.result.lowered, self.target)

    def bound(self, value: str) -> int:
        """The policy's bound where `value` reaches the outputs through layout ops only, else 0.

        The compiler checks every other rewrite bitwise (`compiler.ir.policy_scope`), because
        a difference of one step before a table can grow after it.
        """
        from compiler.ir.policy_scope import is_terminal

        g = self.result.original
        if self.policy.bound == 0:
            return 0
        if value in self.result.lowered.outputs:
            return self.policy.bound
        if g is not None and value in g.values and is_terminal(g, value):
            return self.policy.bound
        return 0

    def proven_nodes(self) -> dict[str, set[str]]:
        """ONNX node names of every proven site, by site id."""
        return {s.id: set(s.nodes) for s in self.result.sites if s.verdict == "proven"}

    def compare(self, feeds: dict[str, np.ndarray], kind: str) -> list[Finding]:
        """Findings of one input batch (empty when everything matches)."""
        out: list[Finding] = []
        try:
            ref = self.ref.values(feeds, self.level)
        except R.ReferenceUndefined as e:
            return [Finding("reference_undefined", str(e), feeds)]
        if not self.project:
            whole = {}
            for level in ("off", "default"):
                try:
                    whole[level] = self.ref.outputs(feeds, level)
                except Exception as e:  # noqa: BLE001 - ORT's optimiser may break the model
                    if level == self.level:
                        raise
                    out.append(Finding(f"ort_{level}_fails", str(e).splitlines()[0][:200], feeds))
            if self.level == "default" and self._exposure_changes_kernels():
                ref = dict(whole[self.level])  # the exposed values are not ORT's: outputs only
            for name, v in whole[self.level].items():
                if _diff(v, ref[name]) != 0:
                    if self.level == "off":  # nothing is fused at level off
                        return [Finding("fuzzer_error", f"exposed values differ on {name}", feeds)]
                    ref = dict(whole[self.level])  # an exposed value stopped a fusion of ORT's:
                    break  # compare the graph outputs only
            if len(whole) == 2:
                for name, v in whole["default"].items():
                    d = _diff(v, whole["off"][name])
                    if d:
                        msg = f"{name}: ORT level default vs off differ by {d}"
                        out.append(Finding("ort_levels_differ", msg, feeds))
        sim = simulate(self.program, feeds)
        proven = self.proven_nodes()
        explained = False
        for step in self.result.lowered.steps:
            ins, outs = _step_io(step)
            for o in outs:
                if o not in ref or o not in sim:
                    continue
                d = _diff(sim[o], ref[o])
                if d is None or d <= self.bound(o):
                    continue
                inputs_equal = all(
                    x not in ref or x not in sim or _diff(sim[x], ref[x]) == 0 for x in ins
                )
                explained = True
                nodes = set(getattr(step, "onnx_nodes", ()))
                what = f"{type(step).__name__} {step.name} ({','.join(sorted(nodes))}) -> {o}"
                msg = (
                    f"{what}: differs from ORT by {d} (allowed {self.bound(o)} under "
                    f"{self.policy}; {kind} input)"
                )
                if not inputs_equal:
                    out.append(Finding("bound_propagation", msg, feeds, "compiler (policy)"))
                elif self._host_differs(step):
                    out.append(Finding("host_reference_divergence", msg, feeds))
                elif type(step).__name__.startswith("Host"):
                    out.append(Finding("host_mismatch", msg, feeds, "compiler/npu_backend host"))
                else:
                    sites = [sid for sid, ns in proven.items() if ns & nodes]
                    cat = "false_proof" if sites else "npu_mismatch"
                    msg += f"; proven site(s) {sites}" if sites else "; no proven site"
                    out.append(Finding(cat, msg, feeds, "prover/compiler"))
                break
            else:
                continue
            break
        if not explained:
            for name in self.result.lowered.outputs:
                d = _diff(sim[name], ref[name])
                if d is None or d > self.policy.bound:
                    out.append(
                        Finding(
                            "output_mismatch",
                            f"graph output {name}: diff {d} ({kind} input)",
                            feeds,
                        )
                    )
        return out

    def _exposure_changes_kernels(self) -> bool:
        """Whether exposing the integer intermediates (`OrtReference.values`) changes which
        kernels ORT's default level runs: e.g. an exposed int8 QuantizeLinear output keeps
        ORT's x86 int8 -> uint8 move from happening, and an s8u8 group then stays a float
        MatMul instead of a QLinearMatMul (with other rounding); the intermediates ORT
        gives then are not those of the model the compiler read."""
        if not hasattr(self, "_exposure"):
            import onnx

            from compiler.frontend.qdq_reading import ort_integer_model

            exposed = onnx.ModelProto()
            exposed.CopyFrom(self.model)
            have = {o.name for o in exposed.graph.output}
            for n in exposed.graph.node:
                if n.op_type in R.FLOAT_PRODUCERS:
                    continue
                for o in n.output:
                    if o and o not in have:
                        exposed.graph.output.append(onnx.ValueInfoProto(name=o))
                        have.add(o)

            def kernels(m: Any) -> Counter:
                return Counter(n.op_type for n in ort_integer_model(m).graph.node)

            try:
                self._exposure = kernels(exposed) != kernels(self.model)
            except Exception:  # noqa: BLE001 - ORT cannot load one of them: compare outputs
                self._exposure = True
        return bool(self._exposure)

    def _host_differs(self, step: Any = None, nodes: set[str] | None = None) -> bool:
        """This CPU's ORT differs from the checked reference profile in what `step` (or the
        ONNX `nodes`) computes: u8s8 accumulation for a uint8 x int8 matmul, the MLAS FMA
        kernel for a table."""
        profile, host = R.profiles(self.reference)
        if nodes is None:
            nodes = set(getattr(step, "onnx_nodes", ()))
        # ORT's x86-64 QDQ transformers move int8 activations to uint8 before making a
        # QLinearMatMul of an s8s8 QDQ group, which then runs the u8s8 kernel
        qdq_moved = self.spec["compute"] == "qdq" and self.spec["a_type"] == "int8"
        u8s8 = (
            self.spec["compute"] in ("qlinear", "integer", "qdq")
            and (self.spec["a_type"] == "uint8" or (qdq_moved and _x86_64()))
            and self.spec["w_type"] == "int8"
            and "mm" in nodes
        )
        if u8s8 and profile.u8s8_accumulation != host.u8s8_accumulation:
            return True
        has_table = any(n.startswith("act") for n in nodes) or type(step).__name__ == "NpuLut"
        # (the generator names every activation node act<i>)
        return has_table and profile.mlas_fma != host.mlas_fma

    def refutations(self) -> tuple[list[Finding], list[tuple[str, dict[str, np.ndarray]]]]:
        """Replay every refuted site's counterexample; return findings and its inputs."""
        out, feeds_list = [], []
        for s in self.result.sites:
            if s.verdict != "refuted":
                continue
            cx = s.counterexample
            if cx is None or cx.inputs is None:
                note = "" if cx is None else cx.note
                out.append(Finding("refutation_not_lifted", f"site {s.id} {s.nodes}: {note}"))
                continue
            feeds = {k: np.asarray(v) for k, v in cx.inputs.items()}
            feeds_list.append((f"counterexample of {s.id}", feeds))
            try:
                ref = self.ref.values(feeds, self.level)
            except R.ReferenceUndefined as e:
                out.append(Finding("reference_undefined", str(e), feeds))
                continue
            if self.level == "default" and not self.project and self._exposure_changes_kernels():
                ref = dict(self.ref.outputs(feeds, self.level))  # exposed values are not ORT's
            bad = []
            allowed = self.bound(s.activation.output)
            # after None: the fused form is undefined there (an NPU precondition fails)
            if cx.after is not None and abs(int(cx.before) - int(cx.after)) <= allowed:
                bad.append(f"before {cx.before} / after {cx.after} differ by at most {allowed}")
            for name, v in (cx.expected or {}).items():
                if name in ref and _diff(v, ref[name]) != 0:
                    bad.append(f"recorded expected {name} differs from ORT")
            el = cx.element or {}
            if el.get("value") in ref and el.get("index") is not None:
                got = int(np.asarray(ref[el["value"]])[tuple(el["index"])])
                if got != int(cx.before):
                    bad.append(
                        f"ORT gives {got} at {el['value']}{el['index']}, cex says {cx.before}"
                    )
            if bad:
                msg = f"site {s.id} {s.nodes}: " + "; ".join(bad)
                if self._host_differs(nodes=set(s.nodes)):
                    out.append(Finding("host_reference_divergence", msg, feeds))
                else:
                    out.append(
                        Finding("refutation_not_reproduced", msg, feeds, "compiler/proving/cex")
                    )
        return out, feeds_list


def _x86_64() -> bool:
    import platform

    return platform.machine().lower() in ("x86_64", "amd64")


def _minimise(checker: Checker, f: Finding) -> Finding:
    """Keep one row of the failing input (others at the zero point) if it still fails."""
    if f.feeds is None or len(f.feeds) != 1:
        return f
    ((key, x),) = f.feeds.items()
    fill = checker.spec["a_zp"] if x.dtype.kind in "iu" else 0
    for r in range(x.shape[0]):
        y = np.full_like(x, fill)
        y[r] = x[r]
        found = [g for g in checker.compare({key: y}, "minimised") if g.category == f.category]
        if found:
            return Finding(f.category, found[0].detail, {key: y}, f.where)
    return f


def _zero_feeds(model: Any) -> dict[str, np.ndarray]:
    from onnx import helper as oh

    out = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        out[vi.name] = np.zeros(shape, oh.tensor_dtype_to_np_dtype(tt.elem_type))
    return out


def check_model(
    index: int, seed: int, timeout_s: float = 2.0, reference: str = "onnx"
) -> tuple[ModelResult, Any]:
    """Generate model `index` of `seed` and check it; returns (result, checker or None)."""
    from compiler.cli.common import expected_errors

    rng = np.random.default_rng([seed, index])
    spec = G.random_spec(rng)
    res = ModelResult(index, spec, tags(spec))
    t0 = time.perf_counter()
    model = G.build(spec)
    checker = Checker(spec, model, timeout_s, reference)
    try:
        checker.compile()
    except expected_errors() as e:
        res.status, res.reject_reason = "rejected", _group(str(e).splitlines()[0] if str(e) else "")
        res.seconds = time.perf_counter() - t0
        return res, None
    except Exception as e:  # noqa: BLE001 - an internal error is exactly what we look for
        res.status = "crash"
        res.findings.append(Finding("crash", f"{type(e).__name__}: {str(e)[:300]}", None, "?"))
        res.seconds = time.perf_counter() - t0
        return res, checker
    res.verdicts.update(s.verdict for s in checker.result.sites)
    try:  # can ONNX Runtime run this model at all? (with the project's Requantize too)
        checker.ref.values(_zero_feeds(model), checker.level)
    except R.ReferenceUndefined:
        pass
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own classes
        res.findings.append(Finding("ort_rejects", str(e).splitlines()[0][:200]))
        res.seconds = time.perf_counter() - t0
        return res, checker
    feeds: dict[str, np.ndarray] | None = None
    try:
        found, cex_feeds = checker.refutations()
        res.findings += found
        runs = [(b.kind, b.feeds) for b in I.batches(spec, rng)] + cex_feeds
        seen: set[str] = {f.category for f in res.findings if f.failure}
        for kind, feeds in runs:
            for f in checker.compare(feeds, kind):
                if f.failure and f.category in seen:
                    continue
                if f.failure:
                    seen.add(f.category)
                    f = _minimise(checker, f)
                if f.category in INFO and any(g.category == f.category for g in res.findings):
                    continue
                res.findings.append(f)
    except Exception as e:  # noqa: BLE001
        res.status = "crash"
        msg = f"run: {type(e).__name__}: {str(e)[:300]}"
        res.findings.append(Finding("crash", msg, feeds, "npu_backend"))
    res.seconds = time.perf_counter() - t0
    return res, checker


def write_reproducer(out_dir: Path, res: ModelResult, f: Finding, model_bytes: bytes) -> Path:
    """`out_dir/<category>/m<index>/`: model.onnx, inputs.npz, meta.json."""
    d = out_dir / f.category / f"m{res.index:05d}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "model.onnx").write_bytes(model_bytes)
    if f.feeds is not None:
        np.savez(d / "inputs.npz", **f.feeds)
    ref = res.spec.get("reference", "onnx")
    meta = {
        "index": res.index,
        "category": f.category,
        "detail": f.detail,
        "where": f.where,
        "target": res.spec["target"],
        "policy": res.spec["policy"],
        "spec": res.spec,
        "verdicts": dict(res.verdicts),
        "commands": [
            f"prover check model.onnx --target {res.spec['target']} "
            f"--policy {res.spec['policy']} --reference {ref} --proofs-mode off",
            f"npuc compile model.onnx -o p.npuprog --target {res.spec['target']} "
            f"--policy {res.spec['policy']} --reference {ref} --proofs-mode off && "
            "npuc run p.npuprog --input inputs.npz -o out.npz",
        ],
    }
    (d / "meta.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    return d


def confirm_with_cli(d: Path) -> dict[str, Any]:
    """Replay a reproducer with the real commands (`prover check`, `npuc compile`, `npuc
    run`, proof store off) and ORT at level off; the outcome is added to its meta.json."""
    import subprocess

    meta = json.loads((d / "meta.json").read_text())
    common = ["--target", meta["target"], "--policy", meta["policy"], "--proofs-mode", "off"]
    common += ["--reference", meta["spec"].get("reference", "onnx")]
    common.append("--no-progress")

    def tool(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", *args], cwd=d, capture_output=True, text=True, timeout=300
        )

    out: dict[str, Any] = {}
    p = tool("compiler.cli.prover", "check", "model.onnx", *common)
    out["prover_check_exit"] = p.returncode
    p = tool("compiler.cli.npuc", "compile", "model.onnx", "-o", "p.npuprog", *common)
    out["npuc_compile_exit"] = p.returncode
    if p.returncode == 0 and (d / "inputs.npz").is_file():
        p = tool("compiler.cli.npuc", "run", "p.npuprog", "--input", "inputs.npz", "-o", "out.npz")
        out["npuc_run_exit"] = p.returncode
        if p.returncode == 0:
            import onnx

            with np.load(d / "inputs.npz") as z:
                feeds = {k: z[k] for k in z.files}
            model = onnx.load(str(d / "model.onnx"))
            reading = getattr(
                R.profiles(meta["spec"].get("reference", "onnx"))[0], "qdq_reading", ""
            )
            level = "default" if str(reading) == "integer" else "off"
            try:
                ort_ref = R.OrtReference(model)
                if G.uses_project_domain(model):
                    env = ort_ref.values(feeds, level)
                else:
                    env = ort_ref.outputs(feeds, level)
            except Exception as e:  # noqa: BLE001 - ORT may have no kernel for the model
                out["ort"] = str(e).splitlines()[0][:200]
                env = {}
            want = {o.name: env[o.name] for o in model.graph.output if o.name in env}
            with np.load(d / "out.npz") as z:
                out["npuc_run_max_diff"] = {k: _diff(z[k], want[k]) for k in z.files if k in want}
    if p.returncode not in (0, 1, 2, 3):
        out["stderr"] = p.stderr.strip().splitlines()[-1:] if p.stderr else []
    meta["cli"] = out
    (d / "meta.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    return out


@dataclass
class Summary:
    """Every model's result, and the run's parameters."""

    seed: int
    results: list[ModelResult]
    seconds: float
    out_dir: Path

    def failures(self) -> list[tuple[ModelResult, Finding]]:
        return [(r, f) for r in self.results for f in r.findings if f.failure]

    def count(self, category: str) -> int:
        return sum(1 for r in self.results for f in r.findings if f.category == category)


def run(
    models: int,
    seed: int = 0,
    *,
    out_dir: Path | None = None,
    timeout_s: float = 2.0,
    exclude: Callable[[set[str]], bool] | None = None,
    log: Callable[[str], None] | None = None,
    confirm: bool = False,
    reference: str = "onnx",
) -> Summary:
    """Check `models` generated models (skipping those `exclude(tags)` drops).

    `confirm`: replay every reproducer with the real commands (`confirm_with_cli`).
    """
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="fuzz_diff_"))
    results: list[ModelResult] = []
    t0 = time.perf_counter()
    index = 0
    while len([r for r in results if r.status != "skipped"]) < models:
        rng = np.random.default_rng([seed, index])
        spec = G.random_spec(rng)
        if exclude is not None and exclude(tags(spec)):
            results.append(ModelResult(index, spec, tags(spec), status="skipped"))
            index += 1
            continue
        res, _ = check_model(index, seed, timeout_s, reference)
        res.spec["reference"] = reference
        results.append(res)
        for f in res.findings:
            if f.failure:
                d = write_reproducer(out, res, f, G.build(res.spec).SerializeToString())
                res.reproducers.append(str(d))
                cli = confirm_with_cli(d) if confirm else ""
                if log:
                    log(f"FAIL {f.category} model {index}: {f.detail} -> {d} {cli}")
        index += 1
    return Summary(seed, results, time.perf_counter() - t0, out)


def _row(name: str, rs: Iterable[ModelResult]) -> list[Any]:
    rs = list(rs)
    v: Counter = Counter()
    for r in rs:
        v.update(r.verdicts)
    fails = Counter(f.category for r in rs for f in r.findings if f.failure)
    return [
        name,
        len(rs),
        sum(v.values()),
        v["proven"],
        v["refuted"],
        v["unknown"],
        v["rejected"],
        sum(1 for r in rs if r.status == "rejected"),
        fails["false_proof"],
        sum(fails.values()) - fails["false_proof"] - fails["crash"],
        fails["crash"],
    ]


def render(summary: Summary) -> str:
    """The summary table, failure and info counts, rejection groups."""
    rs = [r for r in summary.results if r.status != "skipped"]
    head = ["category", "models", "sites", "proven", "refuted", "unknown", "rej.site",
            "rej.model", "false", "other", "crash"]  # fmt: skip
    rows = [_row("ALL", rs)]
    all_tags = sorted({t for r in rs for t in r.tags})
    rows += [_row(t, [r for r in rs if t in r.tags]) for t in all_tags]
    w = [max(len(str(x[i])) for x in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(str(c).rjust(w[i]) if i else str(c).ljust(w[i]) for i, c in enumerate(x))
             for x in [head, *rows]]  # fmt: skip
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(3, "-" * len(lines[0]))
    lines.append("")
    counts = Counter(f.category for r in rs for f in r.findings)
    n_models = len(rs)
    lines.append(
        f"{n_models} models (seed {summary.seed}) in {summary.seconds:.0f} s "
        f"({summary.seconds / max(1, n_models):.2f} s/model); skipped by filter: "
        f"{len(summary.results) - n_models}"
    )
    lines.append(
        "failures: " + ", ".join(f"{c} {counts[c]}" for c in FAILURES) + f" (models: "
        f"{sum(1 for r in rs if any(f.failure for f in r.findings))})"
    )
    lines.append("counted, not failures: " + ", ".join(f"{c} {counts[c]}" for c in INFO))
    rej = Counter(r.reject_reason for r in rs if r.status == "rejected")
    if rej:
        lines.append(f"rejected by the frontend (exit 2), {sum(rej.values())} models:")
        lines += [f"  {n:5d}  {msg}" for msg, n in rej.most_common()]
    ort = Counter(_group(f.detail) for r in rs for f in r.findings if f.category == "ort_rejects")
    if ort:
        lines.append(f"ONNX Runtime cannot run a model the frontend accepts, {sum(ort.values())}:")
        lines += [f"  {n:5d}  {msg}" for msg, n in ort.most_common()]
    fails = summary.failures()
    if fails:
        lines.append(f"failures ({len(fails)}), reproducers under {summary.out_dir}:")
        for r, f in fails[:60]:
            lines.append(f"  model {r.index} [{f.category}] {f.detail}")
    return "\n".join(lines)


def _tag_filter(only: set[str], skip: set[str]) -> Callable[[set[str]], bool]:
    """`exclude` for `run`: drop models lacking a tag of `only` or having one of `skip`."""
    return lambda tags: not only <= tags or bool(skip & tags)


def main(argv: list[str] | None = None) -> int:
    """Command line; exit 0 when no failure was found, 1 otherwise."""
    p = argparse.ArgumentParser(prog="fuzz_diff", description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=100, help="models to check (default 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="reproducers (default: a temp dir)")
    p.add_argument("--timeout", type=float, default=2.0, help="seconds per obligation")
    p.add_argument(
        "--reference",
        default="onnx",
        help="reference profile the models are checked against (prover check --reference)",
    )
    p.add_argument("--json", type=Path, default=None, help="write per-model results here")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per model")
    p.add_argument(
        "--only", action="append", default=[], metavar="TAG", help="only models with this tag"
    )
    p.add_argument(
        "--skip", action="append", default=[], metavar="TAG", help="skip models with this tag"
    )
    p.add_argument(
        "--confirm",
        action="store_true",
        help="replay each failure with `prover check`, `npuc compile` and `npuc run`",
    )
    p.add_argument(
        "--compose-tables",
        action="store_true",
        help="compile with compose_tables=True (Act2(Act1(MatMul)) as one proven table)",
    )
    p.add_argument("--schedule-strategy", choices=["early", "alternatives", "late"])
    args = p.parse_args(argv)
    EXTRA_COMPILE.clear()
    if args.compose_tables:
        EXTRA_COMPILE["compose_tables"] = True
    if args.schedule_strategy:
        EXTRA_COMPILE["schedule_strategy"] = args.schedule_strategy
    if args.models < 1 or args.timeout <= 0:
        p.error("--models and --timeout must be positive")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    s = run(
        args.models,
        args.seed,
        out_dir=args.out,
        timeout_s=args.timeout,
        log=log,
        confirm=args.confirm,
        reference=args.reference,
        exclude=_tag_filter(set(args.only), set(args.skip)) if args.only or args.skip else None,
    )
    if args.verbose:
        for r in s.results:
            print(f"{r.index:5d} {r.status:8s} {r.seconds:6.2f}s {dict(r.verdicts)} "
                  f"{[f.category for f in r.findings]} {r.reject_reason}")  # fmt: skip
    print(render(s))
    if args.json:
        data = [
            {
                "index": r.index,
                "status": r.status,
                "tags": sorted(r.tags),
                "verdicts": dict(r.verdicts),
                "reject_reason": r.reject_reason,
                "findings": [[f.category, f.detail] for f in r.findings],
                "reproducers": r.reproducers,
                "seconds": round(r.seconds, 3),
            }
            for r in s.results
        ]
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    return 1 if s.failures() else 0


if __name__ == "__main__":
    sys.exit(main())
