"""The ledger of `npuc compile`: one regenerate-and-simulate per fusion (old) vs two runs (new).

One command (issue 15 item 5):

    python3 bench/ledger_bench.py                 # 16, 64 and 256 sites
    python3 bench/ledger_bench.py --sites 16 64   # quicker

Per size, a chain of QLinearMatMul -> QLinearSigmoid sites (16x16 int8 weights, one row,
`bench/fusion_models.chain`) on the default target. Measured in this one run, CPU time of
this process: `generate` (the program `npuc compile` writes, for scale), the old ledger
(kept here only: for every fusion, regenerate the whole program with that site split and
simulate it) and the new one (`npu_backend.ledger.ledger`: the fused and the fully
unfused program simulated once each, counters attributed per instruction). Both must
give the same per-site intermediate bytes, else the run stops.

Then, unless --no-cli, the whole CLI on the same chain as an ONNX model (QLinearMatMul ->
QLinearSigmoid, written to a temp dir): CPU seconds of the child (user + sys) of
`prover check` and `npuc compile --report` (both `--proofs-mode off`), best of --repeat,
and their ratio (issue 15's target: `npuc compile` within 2x of `prover check`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from child_time import repeat_child  # noqa: E402
from fusion_models import chain  # noqa: E402

from npu_backend.codegen import generate  # noqa: E402
from npu_backend.ledger import LedgerError, ledger, random_inputs, unfuse_with_add  # noqa: E402
from npu_backend.lowered import LoweredModel, NpuMatMul  # noqa: E402
from npu_backend.simulator import run  # noqa: E402
from npu_backend.target import Target, load_target  # noqa: E402


def old_ledger(lowered: LoweredModel, target: Target) -> list[tuple[str, int, int]]:
    """The per-fusion ledger `npuc compile` used before: (site, bytes not written, not read)."""
    inputs = random_inputs(lowered.inputs)
    fused_out, fc = run(generate(lowered, target), inputs)
    out = []
    for k, st in enumerate(lowered.steps):
        if not (isinstance(st, NpuMatMul) and st.fused):
            continue
        split, extra = unfuse_with_add(st)
        steps = lowered.steps[:k] + split + lowered.steps[k + 1 :]
        model = LoweredModel(
            list(lowered.inputs), list(lowered.outputs), {**lowered.constants, **extra}, steps
        )
        got, uc = run(generate(model, target), inputs)
        for name in fused_out:
            if not np.array_equal(fused_out[name], got[name]):
                raise LedgerError(f"{st.name}: fused and unfused programs differ on {name!r}")
        out.append(
            (
                st.name,
                uc.bytes_written["sram"] - fc.bytes_written["sram"],
                uc.bytes_read["sram"] - fc.bytes_read["sram"],
            )
        )
    return out


def onnx_chain(sites: int, path: Path, k: int = 16) -> None:
    """The chain as an ONNX model: `sites` QLinearMatMul -> QLinearSigmoid pairs, one row."""
    import onnx
    from onnx import TensorProto as TP
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    scalars = {"a_s": 0.02, "w_s": 0.01, "y_s": 0.05, "o_s": 1 / 256}
    inits = [nh.from_array(np.array(v, np.float32), n) for n, v in scalars.items()]
    inits += [
        nh.from_array(np.array(0, np.int8), "z"),
        nh.from_array(np.array(-128, np.int8), "o_z"),
    ]
    nodes, x = [], "x"
    for i in range(sites):
        inits.append(nh.from_array(rng.integers(-128, 128, (k, k)).astype(np.int8), f"W{i}"))
        a_s, a_z = ("a_s", "z") if i == 0 else ("o_s", "o_z")
        mm_in = [x, a_s, a_z, f"W{i}", "w_s", "z", "y_s", "z"]
        nodes.append(oh.make_node("QLinearMatMul", mm_in, [f"h{i}"], name=f"mm{i}"))
        act_in = [f"h{i}", "y_s", "z", "o_s", "o_z"]
        nodes.append(
            oh.make_node(
                "QLinearSigmoid", act_in, [f"y{i}"], name=f"act{i}", domain="com.microsoft"
            )
        )
        x = f"y{i}"
    graph = oh.make_graph(
        nodes,
        "chain",
        [oh.make_tensor_value_info("x", TP.INT8, [1, k])],
        [oh.make_tensor_value_info(x, TP.INT8, [1, k])],
        inits,
    )
    opsets = [oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)]
    onnx.save(oh.make_model(graph, opset_imports=opsets), path)


def _child_cpu(argv: list[str], repeat: int) -> float:
    """Best CPU seconds (user + sys) of `python -m argv` over `repeat` runs."""
    return min(r.cpu_s for r in repeat_child([sys.executable, "-m", *argv], repeat))


def cli_figures(sites: int, repeat: int) -> tuple[float, float]:
    """CPU seconds of `prover check` and `npuc compile --report` on the ONNX chain."""
    with tempfile.TemporaryDirectory() as d:
        model = Path(d) / f"chain{sites}.onnx"
        onnx_chain(sites, model)
        off = ["--proofs-mode", "off"]
        check = _child_cpu(["compiler.cli.prover", "check", str(model), *off], repeat)
        out = ["-o", f"{d}/p.npuprog", "--report", f"{d}/r.json"]
        comp = _child_cpu(["compiler.cli.npuc", "compile", str(model), *out, *off], repeat)
    return check, comp


def _cpu(f, *args):
    t0 = time.process_time()
    v = f(*args)
    return time.process_time() - t0, v


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sites", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--no-cli", action="store_true", help="skip the CLI figures")
    ap.add_argument("--repeat", type=int, default=3, help="CLI runs per command (best of)")
    args = ap.parse_args()
    target = load_target()
    print(f"{'sites':>5} {'generate':>9} {'old ledger':>11} {'new ledger':>11} {'old/new':>8}")
    for n in args.sites:
        model = chain(target, n)
        t_gen, _ = _cpu(generate, model, target)
        t_new, new = _cpu(ledger, model, target)
        t_old, old = _cpu(old_ledger, model, target)
        got = [(e.site, e.bytes_not_written, e.bytes_not_read) for e in new]
        if got != old:
            sys.exit(f"{n} sites: old and new ledgers disagree on the intermediate bytes")
        print(f"{n:5d} {t_gen:8.2f}s {t_old:10.2f}s {t_new:10.2f}s {t_old / t_new:7.1f}x")
    print("CPU seconds of this process; old/new: how much the two-run ledger saves")
    if not args.no_cli:
        n = max(args.sites)
        check, comp = cli_figures(n, args.repeat)
        print(
            f"CLI, {n} sites, best of {args.repeat} (child CPU): prover check {check:.2f}s, "
            f"npuc compile --report {comp:.2f}s, compile/check {comp / check:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
