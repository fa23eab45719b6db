"""Lowered QLinearMatMul -> activation models built in process for the backend benchmarks.

The steps are what the compiler lowers `QLinearMatMul -> QLinearSigmoid` (or Tanh) to:
an `NpuMatMul` whose epilogue requantizes with the target's scheme and looks the
activation up in a 256-entry table built by the target's toolchain. No ONNX, no prover:
these benchmarks measure the backend (codegen, simulator, ledger), not legality.
"""

from __future__ import annotations

import numpy as np

from npu_backend.lowered import LoweredModel, NpuMatMul, Step, TensorSpec
from npu_backend.postprocess import LutParams, PostProcess
from npu_backend.target import Target, requant_from_scale
from prover.lut import build_lut


def fused_post(
    target: Target, function: str = "sigmoid", k: int = 16, in_scale: float = 0.05
) -> PostProcess:
    """Requantize (scale chosen so a K-long dot product spans the int8 range) + table."""
    scheme = target.compute("MatMul").requant_scheme
    scale = 1.0 / (64.0 * max(1.0, float(np.sqrt(k))) * 16)
    rq = requant_from_scale(scale, 0, "int8", scheme)
    spec = target.lut_spec(function, in_scale, 0, "int8", 1 / 256, -128, "int8")
    lut = LutParams(tuple(int(v) for v in build_lut(spec)), "int8", "int8", spec.index_order, spec)
    return PostProcess(rq, function=function, lut=lut)


def _mm(name: str, a: str, w: str, out: str, post: PostProcess, a_zp: int) -> NpuMatMul:
    return NpuMatMul(
        name=name,
        a=a,
        w=w,
        out=out,
        a_zp=a_zp,
        w_zp=0,
        bias=None,
        a_type="int8",
        w_type="int8",
        post=post,
        onnx_nodes=(f"{name}_matmul", f"{name}_act"),
    )


def chain(target: Target, sites: int, k: int = 16, m: int = 1, seed: int = 0) -> LoweredModel:
    """`sites` QLinearMatMul -> QLinearSigmoid pairs in a chain, k x k weights each."""
    rng = np.random.default_rng(seed)
    post = fused_post(target, "sigmoid", k)
    consts: dict[str, np.ndarray] = {}
    steps: list[Step] = []
    x = "x"
    for i in range(sites):
        consts[f"w{i}"] = rng.integers(-128, 128, (k, k)).astype(np.int8)
        steps.append(_mm(f"mm{i}", x, f"w{i}", f"y{i}", post, 0 if i == 0 else -128))
        x = f"y{i}"
    return LoweredModel([TensorSpec("x", "int8", (m, k))], [x], consts, steps)


def repeated(
    target: Target,
    m: int,
    k: int,
    n: int,
    calls: int = 1,
    functions: tuple[str, ...] = ("sigmoid",),
    seed: int = 0,
) -> LoweredModel:
    """`calls` independent QLinearMatMul -> activation calls on inputs x0.., one weight.

    Call i uses activation `functions[i % len(functions)]`: one function means every call
    reuses one table (and one parameter record); several make the calls alternate tables.
    """
    rng = np.random.default_rng(seed)
    posts = {f: fused_post(target, f, k) for f in functions}
    consts = {"w": rng.integers(-128, 128, (k, n)).astype(np.int8)}
    steps: list[Step] = []
    inputs = []
    for i in range(calls):
        inputs.append(TensorSpec(f"x{i}", "int8", (m, k)))
        post = posts[functions[i % len(functions)]]
        steps.append(_mm(f"mm{i}", f"x{i}", "w", f"y{i}", post, 0))
    return LoweredModel(inputs, [f"y{i}" for i in range(calls)], consts, steps)
