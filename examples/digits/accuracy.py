"""Accuracy of ONNX Runtime and of the compiled NPU program on the 360 test digits.

    python3 examples/digits/accuracy.py                      # the 16 quantized models
    python3 examples/digits/accuracy.py digits_matmul_qop_u8s8_pc.onnx --reference onnx

For each model: the fusion sites and their verdicts (`prover check`), the program
`npuc compile` writes (only proven fusions applied), run on the bit-exact simulator
(`npuc run`) on `digits_test.npz`; next to it ONNX Runtime on the same inputs at the
optimisation level the reference names: its default level (the integer QDQ kernels)
for the integer QDQ reading (the default profile `onnx`), optimisations off for the
`*-qdq-float` profiles. Printed: both accuracies and whether every output (labels and
probabilities) is equal bit for bit. Exit 1 if any program differs from ORT under
`bitwise`, else 0. Proofs are not stored (`--proofs-mode off`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def ort_outputs(path: Path, x: np.ndarray, optimized: bool) -> dict[str, np.ndarray]:
    """ONNX Runtime's outputs (CPU) at its default level, or with optimisations off."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if not optimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, {"input": x}), strict=True))


def program_outputs(program, x: np.ndarray) -> dict[str, np.ndarray]:
    """The program on the simulator, as `npuc run` runs it (any batch size)."""
    from npu_backend.runner import run_batched

    return run_batched(program, {program.inputs[0].name: x})[0]


def measure(path: Path, x: np.ndarray, y: np.ndarray, reference: str, target: str | None):
    """(line to print, bitwise-equal) for one model."""
    from compiler.api import compile_model
    from compiler.ort.reference_host import resolve_reference
    from npu_backend.codegen import generate
    from npu_backend.target import load_target
    from prover.reference import QdqReading

    profile = resolve_reference(reference)
    tgt = load_target(target)
    t0 = time.perf_counter()
    r = compile_model(path, "bitwise", tgt, reference=profile)
    program = generate(r.lowered, tgt)
    npu = program_outputs(program, x)
    ort = ort_outputs(path, x, optimized=profile.qdq_reading == QdqReading.INTEGER)
    same = all(np.array_equal(np.asarray(npu[k]), np.asarray(v)) for k, v in ort.items())
    acc_ort = float((np.asarray(ort["label"]).reshape(-1) == y).mean())
    acc_npu = float((np.asarray(npu["label"]).reshape(-1) == y).mean())
    s = r.summary
    fused = sum(1 for site in r.sites if site.applied)
    line = (
        f"{path.name:32s} {s['candidates']:5d} {fused:5d} {acc_ort:8.4f} {acc_npu:8.4f} "
        f"{'yes' if same else 'NO':>9s} {time.perf_counter() - t0:6.1f}s"
    )
    return line, same


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="*", help="model files (default: every quantized digits model)")
    p.add_argument("--reference", default="onnx", help="reference profile (default onnx)")
    p.add_argument("--target", default=None, help="target TOML (default npu_float)")
    args = p.parse_args(argv)
    data = np.load(HERE / "digits_test.npz")
    x, y = data["input"], data["labels"]
    models = [Path(m) if Path(m).exists() else HERE / m for m in args.models] or sorted(
        q for q in HERE.glob("digits_*_q*.onnx")
    )
    print(f"reference {args.reference}, policy bitwise, {len(y)} test digits")
    print(
        f"{'model':32s} {'sites':>5s} {'fused':>5s} {'ORT':>8s} {'npuc run':>8s} "
        f"{'bitwise':>9s} {'time':>7s}"
    )
    ok = True
    for m in models:
        line, same = measure(m, x, y, args.reference, args.target)
        ok &= same
        print(line, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
