"""Coverage of a model zoo: what runs on the NPU, which fusions are decided, and whether the
program equals ONNX Runtime bit for bit.

    python3 examples/zoo/coverage.py DIR [--jobs 2] [--target npu_float] [--only ARCH...]
                                         [--variants V...] [--json OUT] [--timeout 900]
    python3 examples/zoo/coverage.py --from-json OUT      # reprint an earlier run's tables

Run it from the repository root. Every model of `DIR/manifest.toml` (or every `*.onnx`
in DIR) is measured with this checkout's code, by `--jobs` worker processes forked once
with the tools imported (a fresh process per model paid seconds of start-up each on a
loaded machine), each model within `--timeout` seconds (`--one MODEL` measures one and
prints its JSON):

- **compute ops and MACs, NPU vs host**: the model is compiled as `npuc compile` compiles
  it (`compiler.cli.check_run.run_pipeline`, `--policy bitwise`, no proof store, then
  `npu_backend.codegen.generate`); a compute node (Conv, ConvInteger, QLinearConv, MatMul,
  MatMulInteger, QLinearMatMul, Gemm, QGemm, LSTM, GRU, RNN, DynamicQuantizeLSTM) is on
  the NPU if an NPU MatMul step implements it, else on the host. MACs as `macs.py` counts
  them: the model's from ORT's run-time shapes, the program's NPU MACs from its `MatMul`
  instructions (tiled and window convs included), its host MACs from the compute nodes of
  its host ONNX steps; `(?)` marks a model whose NPU + host MACs differ from its count.
- **activation adjacencies**: present = activation nodes of the ONNX graph (Sigmoid,
  Tanh, Relu, Clip, LeakyRelu, HardSigmoid, HardSwish, Elu, Gelu, Softplus, and their
  QLinear forms) whose input comes from a compute node through quantize / dequantize /
  layout nodes only; proposed = the candidate sites of the check; proven; refused = the
  other sites, by reason code.
- **`npuc run` vs ORT**: the program runs on the simulator (`npu_backend.runner.
  run_batched`, what `npuc run` runs) and ORT's default session on the same inputs; every
  output must be equal bit for bit. Twice: on random inputs (token ids below the
  embedding's size, masks of ones), and on inputs placed on rounding half-steps: a float
  input quantized by a constant `QuantizeLinear` gets values `(q - zp + 0.5) * scale`; one
  quantized by `DynamicQuantizeLinear` gets values on half-steps of the scale its range
  gives (min -4, max 3.96875: scale 1/32, zero point 128). `n/a` when no input is
  quantized.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(REPO))  # this checkout's compiler, not an installed one

ACTIVATIONS = {
    "Sigmoid",
    "Tanh",
    "Relu",
    "Clip",
    "LeakyRelu",
    "HardSigmoid",
    "HardSwish",
    "Elu",
    "Gelu",
    "Softplus",
    "QLinearSigmoid",
    "QLinearLeakyRelu",
    "QLinearHardSigmoid",
}
THROUGH = {
    "QuantizeLinear",
    "DequantizeLinear",
    "Reshape",
    "Transpose",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Identity",
    "Cast",
}
# measured first (the convolution issue's four), then the rest, the largest files first
FIRST = ("mobilenet_v2", "mobilenet_v3_small", "resnet18", "efficientnet_b0")
DYN_SCALE = 1.0 / 32  # DynamicQuantizeLinear over [-4, 3.96875]: scale 1/32, zero point 128
DYN_ZP = 128


# --- one model (in its own process) ----------------------------------------------------


def adjacencies(model: Any) -> int:
    """Activation nodes whose input comes from a compute node through THROUGH nodes only."""
    from macs import COMPUTE

    producer = {o: n for n in model.graph.node for o in n.output}

    def from_compute(name: str, depth: int = 0) -> bool:
        n = producer.get(name)
        if n is None or depth > 8:
            return False
        if n.op_type in COMPUTE:
            return True
        return n.op_type in THROUGH and bool(n.input) and from_compute(n.input[0], depth + 1)

    return sum(1 for n in model.graph.node if n.op_type in ACTIVATIONS and from_compute(n.input[0]))


def _quantizer(model: Any, name: str) -> tuple[str, float, int, str] | None:
    """How graph input `name` is quantized: ("static", scale, zp, type) by a constant
    QuantizeLinear, ("dynamic", ...) by DynamicQuantizeLinear, None otherwise."""
    from onnx import numpy_helper

    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        const = n.op_type == "Constant" and n.attribute
        if const and n.attribute[0].t is not None and n.attribute[0].name == "value":
            init[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    for n in model.graph.node:
        if not n.input or n.input[0] != name:
            continue
        if n.op_type == "DynamicQuantizeLinear":
            return ("dynamic", DYN_SCALE, DYN_ZP, "uint8")
        if n.op_type == "QuantizeLinear" and len(n.input) > 1 and n.input[1] in init:
            s = np.asarray(init[n.input[1]]).reshape(-1)
            zp = np.asarray(init[n.input[2]]) if len(n.input) > 2 and n.input[2] in init else None
            if s.size != 1:
                return None
            kind = "uint8" if zp is None else str(zp.dtype)
            return ("static", float(s[0]), 0 if zp is None else int(zp.reshape(-1)[0]), kind)
    return None


def _vocab(model: Any, name: str) -> int:
    """The row count of the smallest table a Gather reads with input `name` (64 if none)."""
    dims = {t.name: tuple(t.dims) for t in model.graph.initializer}
    sizes = [
        dims[n.input[0]][0]
        for n in model.graph.node
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == name and n.input[0] in dims
    ]
    return min(sizes) if sizes else 64


def inputs_for(
    model: Any, session: Any, half_steps: bool, seed: int
) -> dict[str, np.ndarray] | None:
    """Inputs for every graph input (None: half steps asked, and no input is quantized)."""
    rng = np.random.default_rng(seed)
    types = {
        "tensor(float)": np.float32,
        "tensor(int64)": np.int64,
        "tensor(int32)": np.int32,
        "tensor(uint8)": np.uint8,
        "tensor(int8)": np.int8,
        "tensor(bool)": np.bool_,
    }
    feeds: dict[str, np.ndarray] = {}
    placed = False
    for i in session.get_inputs():
        shp = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        dt = types[i.type]
        q = _quantizer(model, i.name) if dt is np.float32 else None
        if half_steps and q is not None:
            kind, scale, zp, qtype = q
            lo, hi = (-128, 127) if qtype == "int8" else (0, 255)
            k = rng.integers(lo, hi, size=shp)  # k + 0.5 stays inside [lo, hi]
            x = ((k - zp + 0.5) * scale).astype(np.float32)
            if kind == "dynamic":  # the range that gives scale 1/32 and zero point 128
                flat = x.reshape(-1)
                flat[0], flat[-1] = np.float32(-DYN_ZP * scale), np.float32((255 - DYN_ZP) * scale)
            feeds[i.name] = x
            placed = True
        elif np.issubdtype(dt, np.floating):
            feeds[i.name] = rng.standard_normal(shp).astype(dt)
        elif dt is np.bool_ or "mask" in i.name:
            feeds[i.name] = np.ones(shp, dt)
        else:
            feeds[i.name] = rng.integers(0, _vocab(model, i.name), size=shp).astype(dt)
    return feeds if placed or not half_steps else None


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f":
        return bool(np.array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}")))
    return bool(np.array_equal(a, b))


def measure(path: Path, target: str) -> dict[str, Any]:
    """Everything coverage reports on one model (see the module docstring)."""
    import onnx
    import onnxruntime as ort
    from macs import COMPUTE, model_macs, program_macs

    from compiler.cli.check_run import CheckOptions, run_pipeline
    from compiler.cli.common import expected_errors, one_line
    from compiler.report.json_form import report_json
    from npu_backend.codegen import generate
    from npu_backend.lowered import NpuMatMul
    from npu_backend.program import Program
    from npu_backend.runner import run_batched
    from prover.policy import Policy

    t0 = time.process_time()
    model = onnx.load(str(path))
    out: dict[str, Any] = {"file": path.name, "target": target, "present": adjacencies(model)}
    try:
        out["macs"] = model_macs(model)[0]
    except Exception as e:  # noqa: BLE001 - recorded
        out["error"] = f"model MACs: {type(e).__name__}: {one_line(e)}"
    so = ort.SessionOptions()
    so.log_severity_level = 3
    session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    try:
        run = run_pipeline(
            str(path), CheckOptions(policy=Policy.parse("bitwise"), target=target, progress=False)
        )
    except expected_errors() as e:
        out["check"] = f"exit 2: {one_line(e)}"
        out["cpu_s"] = round(time.process_time() - t0, 2)
        return out
    rep = report_json(run.report)
    out["check"] = f"exit {int(run.report.exit_code())}"
    out["proposed"] = len(rep["sites"])
    out["proven"] = sum(1 for s in rep["sites"] if s["verdict"] == "proven")
    out["refused"] = dict(
        Counter(
            (s.get("reason") or {}).get("code") or s["verdict"]
            for s in rep["sites"]
            if s["verdict"] != "proven"
        )
    )
    compute = {n.name for n in model.graph.node if n.op_type in COMPUTE}
    lowered = run.result.lowered
    on_npu = {
        n for s in lowered.steps if isinstance(s, NpuMatMul) for n in s.onnx_nodes if n in compute
    }
    out["ops_npu"], out["ops_host"] = len(on_npu), len(compute - on_npu)
    with tempfile.TemporaryDirectory() as tmp:
        prog_file = Path(tmp) / "program.npu"
        generate(lowered, run.target).save(prog_file)
        program = Program.load(prog_file)
    npu, host, unknown = program_macs(program)
    out["macs_npu"], out["macs_host"] = npu, host
    if unknown:
        out["unaccounted"] = unknown[:5]
    for name, half in (("run_random", False), ("run_half", True)):
        feeds = inputs_for(model, session, half, seed=1)
        if feeds is None:
            out[name] = "n/a"
            continue
        want = dict(
            zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True)
        )
        try:
            got, _ = run_batched(program, feeds)
        except Exception as e:  # noqa: BLE001 - recorded: a failing run is a result
            out[name] = f"error: {type(e).__name__}: {one_line(e)}"
            continue
        bad = [k for k, v in want.items() if k not in got or not _same(got[k], v)]
        out[name] = "equal" if not bad else f"differs: {', '.join(bad)}"
    out["cpu_s"] = round(time.process_time() - t0, 2)
    return out


# --- the whole zoo -----------------------------------------------------------------------


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout


def _init() -> None:
    """A pool worker: the tools imported once (forked from the parent, which has them),
    ORT's log lines off."""
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)
    signal.signal(signal.SIGALRM, _alarm)


def _one(job: tuple[Any, Path, str, float]) -> dict[str, Any]:
    """Measure one model in a pool worker, within `timeout` seconds (SIGALRM)."""
    entry, directory, target, timeout = job
    base = {"file": entry.file, "arch": entry.arch, "family": entry.family, "target": target}
    t0 = time.process_time()
    signal.alarm(max(1, int(timeout)))
    try:
        return base | measure((directory / entry.file).resolve(), target) | base
    except _Timeout:
        return base | {"check": f"coverage timed out after {timeout:.0f} s"}
    except Exception as e:  # noqa: BLE001 - recorded: one model must not stop the zoo
        why = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        return base | {
            "check": f"coverage failed: {type(e).__name__}: {why}",
            "cpu_s": round(time.process_time() - t0, 2),
        }
    finally:
        signal.alarm(0)


def _cost(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _warm() -> None:
    import onnx  # noqa: F401
    import onnxruntime  # noqa: F401

    import compiler.cli.check_run  # noqa: F401
    import compiler.passes.pipeline  # noqa: F401
    import npu_backend.codegen  # noqa: F401
    import npu_backend.runner  # noqa: F401


def _share(npu: int, total: int | None) -> str:
    return "" if not total else f"{npu / total:.2f}"


def _reasons(c: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))


def tables(results: list[dict[str, Any]]) -> str:
    """Markdown: per target and architecture, then one row per model."""
    out = [
        "| target | architecture | models | compiled | compute ops NPU / host | MACs NPU / host "
        "(NPU share) | adjacencies present / proposed / proven | refused by reason | "
        "run = ORT, random | run = ORT, half-steps |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        groups[(r["target"], "all")].append(r)
        groups[(r["target"], r["arch"])].append(r)

    def runs(rs: list[dict[str, Any]], key: str) -> str:
        c = Counter(
            "equal" if r.get(key) == "equal" else "n/a" if r.get(key) in (None, "n/a") else "DIFF"
            for r in rs
            if "macs_npu" in r
        )
        return ", ".join(f"{k}: {v}" for k, v in sorted(c.items()))

    for (target, arch), rs in sorted(
        groups.items(), key=lambda kv: (kv[0][0], kv[0][1] != "all", kv[0][1])
    ):
        done = [r for r in rs if "macs_npu" in r]
        refused: Counter[str] = Counter()
        for r in done:
            refused.update(r.get("refused", {}))
        npu = sum(r["macs_npu"] for r in done)
        host = sum(r["macs_host"] for r in done)
        total = sum(r.get("macs") or 0 for r in done)
        flag = "" if npu + host == total else " (?)"
        out.append(
            f"| {target} | {arch} | {len(rs)} | {len(done)} | "
            f"{sum(r['ops_npu'] for r in done)} / {sum(r['ops_host'] for r in done)} | "
            f"{npu} / {host} ({_share(npu, total)}){flag} | "
            f"{sum(r.get('present', 0) for r in done)} / {sum(r['proposed'] for r in done)} / "
            f"{sum(r['proven'] for r in done)} | {_reasons(refused)} | "
            f"{runs(rs, 'run_random')} | {runs(rs, 'run_half')} |"
        )
    out += [
        "",
        "<details><summary>Every model</summary>",
        "",
        "| model | target | check | ops NPU / host | MACs NPU / host (share) | present / proposed"
        " / proven | refused by reason | run = ORT random | run = ORT half-steps | CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(results, key=lambda r: (r["target"], r["family"], r["file"])):
        if "macs_npu" not in r:
            out.append(
                f"| {r['file']} | {r['target']} | {r.get('check', '')[:110]} | | | | | | | "
                f"{r.get('cpu_s', '')} |"
            )
            continue
        flag = "" if r["macs_npu"] + r["macs_host"] == r.get("macs") else " (?)"
        out.append(
            f"| {r['file']} | {r['target']} | {r['check']} | {r['ops_npu']} / {r['ops_host']} | "
            f"{r['macs_npu']} / {r['macs_host']} ({_share(r['macs_npu'], r.get('macs'))}){flag} | "
            f"{r.get('present', 0)} / {r['proposed']} / {r['proven']} | "
            f"{_reasons(r.get('refused', {}))} | {r['run_random'][:60]} | {r['run_half'][:60]} | "
            f"{r.get('cpu_s', '')} |"
        )
    out += ["", "</details>"]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", type=Path, nargs="?", help="a zoo directory (build.py --out)")
    ap.add_argument("--jobs", type=int, default=1, help="models measured at once")
    ap.add_argument("--target", action="append", default=None, help="default npu_float")
    ap.add_argument("--only", nargs="+", metavar="ARCH", help="only these architectures")
    ap.add_argument("--variants", nargs="+", metavar="VARIANT", help="only these variants")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per model")
    ap.add_argument("--json", type=Path, help="write the measurements here")
    ap.add_argument("--from-json", type=Path, help="print the tables of an earlier --json")
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # one model, JSON on stdout
    args = ap.parse_args(argv)
    targets = args.target or ["npu_float"]
    if args.one is not None:
        import onnxruntime

        onnxruntime.set_default_logger_severity(3)
        print(json.dumps(measure(args.one, targets[0])))
        return 0
    if args.from_json is not None:
        print(tables(json.loads(args.from_json.read_text())["models"]))
        return 0
    if args.directory is None or not args.directory.is_dir():
        print("error: give a zoo directory (or --from-json FILE)", file=sys.stderr)
        return 2
    from survey import _entries

    entries = [
        e
        for e in _entries(args.directory)
        if (not args.only or e.arch in args.only)
        and (not args.variants or e.variant in args.variants)
    ]
    entries.sort(key=lambda e: (e.arch not in FIRST, -_cost(args.directory / e.file)))
    work = [(e, args.directory, t, args.timeout) for t in targets for e in entries]
    t0 = time.perf_counter()
    results: list[dict[str, Any]] = []

    def save() -> None:
        if args.json is not None:
            wall = round(time.perf_counter() - t0, 1)
            args.json.write_text(json.dumps({"wall_s": wall, "models": results}, indent=1) + "\n")

    _warm()  # imported here, so every forked worker starts with the tools
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(max(1, args.jobs), initializer=_init, maxtasksperchild=16) as pool:
        for k, r in enumerate(pool.imap_unordered(_one, work)):
            results.append(r)
            print(
                f"[{k + 1}/{len(work)}] {r['file']} {r['target']}: {r.get('check', '')[:80]}",
                file=sys.stderr,
            )
            save()
    save()
    print(tables(results))
    print(f"\n{len(work)} model runs in {time.perf_counter() - t0:.0f} s wall ({args.jobs} jobs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
