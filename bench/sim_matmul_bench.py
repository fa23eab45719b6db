"""Simulator speed on one large fused MatMul: old kernels vs new vs ONNX Runtime, one run.

    python3 bench/sim_matmul_bench.py              # M=256, K=1024, N=1024, 3 repeats
    python3 bench/sim_matmul_bench.py --m 64 --k 4096 --n 512 --repeat 5

Four contenders on the same int8 data, CPU time of this process, median of --repeat:
- `old`: what the simulator did first (int64 numpy matmul, then the epilogue evaluated
  per distinct column parameter set, i.e. column by column for per-channel scales);
- `f64`: the kernels of 6f55079 (one float64 BLAS matmul on numpy's default BLAS threads,
  then `apply_columns`), without DMA or counters;
- `new`: `npu_backend.simulator.run` of the generated program (float32 BLAS over exact
  K chunks on one BLAS thread, `npu_backend.exact_matmul`; per-channel float32
  requantization vectorised by column group), so it includes DMA and counter bookkeeping;
- `ort`: ONNX Runtime's QLinearMatMul (per-tensor scales; the per-channel row has none).
Outputs of old and new must be identical (the run stops otherwise); the per-tensor new
output is compared with ORT's (a difference is reported, e.g. an AVX2-only host whose
ORT saturates int16 pairs). Prints ratios new/ort (issue 15 target: within 5x), f64/new and old/new. CPU time counts
every BLAS thread, so a spinning second thread shows up in `f64` on a loaded machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from npu_backend.codegen import generate  # noqa: E402
from npu_backend.lowered import LoweredModel, NpuMatMul, TensorSpec  # noqa: E402
from npu_backend.postprocess import PostProcess, apply_columns  # noqa: E402
from npu_backend.simulator import run  # noqa: E402
from npu_backend.target import load_target, onnx_requant_params  # noqa: E402
from prover.matmul import matmul_acc  # noqa: E402


def _cpu(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.process_time()
        out = fn()
        times.append(time.process_time() - t)
    return statistics.median(times), out


def _ort_session(w: np.ndarray, a_s: float, w_s: float, y_s: float, y_zp: int):
    import onnxruntime as ort
    from onnx import TensorProto as TP
    from onnx import helper, numpy_helper

    k, n = w.shape
    inits = [
        numpy_helper.from_array(np.array(a_s, np.float32), "a_s"),
        numpy_helper.from_array(np.array(0, np.int8), "a_zp"),
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.array(w_s, np.float32), "w_s"),
        numpy_helper.from_array(np.array(0, np.int8), "w_zp"),
        numpy_helper.from_array(np.array(y_s, np.float32), "y_s"),
        numpy_helper.from_array(np.array(y_zp, np.int8), "y_zp"),
    ]
    node = helper.make_node(
        "QLinearMatMul", ["x", "a_s", "a_zp", "w", "w_s", "w_zp", "y_s", "y_zp"], ["y"]
    )
    g = helper.make_graph(
        [node],
        "mm",
        [helper.make_tensor_value_info("x", TP.INT8, None)],
        [helper.make_tensor_value_info("y", TP.INT8, None)],
        inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _old(x, w, post) -> np.ndarray:
    acc = matmul_acc(x, w, 0, 0, None)
    if isinstance(post, PostProcess):
        return post.apply(acc)
    out = np.empty(acc.shape, dtype=np.int64)
    groups: dict[PostProcess, list[int]] = {}
    for j, p in enumerate(post):
        groups.setdefault(p, []).append(j)
    for p, cols in groups.items():
        out[..., cols] = p.apply(acc[..., cols])
    return out


def _f64(x, w, post) -> np.ndarray:
    acc = (x.astype(np.float64) @ w.astype(np.float64)).astype(np.int64)
    return apply_columns(post, acc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    m, k, n = args.m, args.k, args.n
    base = load_target()  # with room for the operands: a plain (untiled) MatMul
    target = dataclasses.replace(base, memories=tuple((k_, 1 << 30) for k_, _ in base.memories))
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (m, k)).astype(np.int8)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    a_s, w_s, y_s, y_zp = 0.02, 0.01, 0.05 * (k / 64) ** 0.5, 3
    per_tensor = PostProcess(onnx_requant_params(a_s, w_s, y_s, y_zp, "int8", "float32"))
    scales = w_s * (1 + np.arange(n) / n)
    per_channel = tuple(
        PostProcess(onnx_requant_params(a_s, float(s), y_s, y_zp, "int8", "float32"))
        for s in scales
    )
    sess = _ort_session(w, a_s, w_s, y_s, y_zp)
    t_ort, ort_y = _cpu(lambda: sess.run(["y"], {"x": x})[0], args.repeat)
    print(f"M={m} K={k} N={n}, CPU seconds, median of {args.repeat}")
    print(
        f"{'epilogue':<12} {'old':>8} {'f64':>8} {'new':>8} {'ort':>8} "
        f"{'new/ort':>8} {'f64/new':>8} {'old/new':>8}"
    )
    for label, post in (("per-tensor", per_tensor), ("per-channel", per_channel)):
        step = NpuMatMul(
            name="mm", a="x", w="w", out="y", a_zp=0, w_zp=0, bias=None,
            a_type="int8", w_type="int8", post=post,
        )  # fmt: skip
        lowered = LoweredModel([TensorSpec("x", "int8", (m, k))], ["y"], {"w": w}, [step])
        prog = generate(lowered, target)
        t_new, res = _cpu(lambda prog=prog: run(prog, {"x": x})[0]["y"], args.repeat)
        t_old, old = _cpu(lambda post=post: _old(x, w, post), args.repeat)
        t_f64, f64 = _cpu(lambda post=post: _f64(x, w, post), args.repeat)
        if not (np.array_equal(np.asarray(res), old) and np.array_equal(f64, old)):
            sys.exit(f"{label}: new, f64 and old simulator outputs differ")
        if label == "per-tensor" and not np.array_equal(np.asarray(res), ort_y):
            # an AVX2-only host's ORT may saturate int16 pairs: say so, keep the timing
            print("note: per-tensor output differs from this host's ONNX Runtime")
        ort_col = f"{t_ort:8.3f}" if label == "per-tensor" else f"{'-':>8}"
        ratio = f"{t_new / t_ort:7.1f}x" if label == "per-tensor" else f"{'-':>8}"
        print(
            f"{label:<12} {t_old:8.3f} {t_f64:8.3f} {t_new:8.3f} {ort_col} {ratio} "
            f"{t_f64 / t_new:7.1f}x {t_old / t_new:7.1f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
