"""Builders shared by the backend tests (small lowered models, no ONNX needed)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from npu_backend.lowered import LoweredModel, NpuMatMul, TensorSpec
from npu_backend.postprocess import LutParams, PostProcess
from npu_backend.target import Target, requant_from_scale
from prover.lut import build_lut

K, N, M = 16, 8, 4


def lut_params(target: Target, function: str = "sigmoid", in_scale: float = 0.05) -> LutParams:
    """A 256-entry int8 -> int8 table built with the target's builder settings."""
    spec = target.lut_spec(function, in_scale, 0, "int8", 1 / 256, -128, "int8")
    return LutParams(tuple(int(v) for v in build_lut(spec)), "int8", "int8", spec.index_order, spec)


def fused_post(
    target: Target, function: str = "sigmoid", scale: float = 0.003, zp: int = 2, clip=None
) -> PostProcess:
    """Requantize (target scheme) + optional clip + LUT."""
    scheme = target.compute("MatMul").requant_scheme
    rq = requant_from_scale(scale, zp, "int8", scheme)
    return PostProcess(rq, clip=clip, function=function, lut=lut_params(target, function))


def requant_post(target: Target, scale: float = 0.003, zp: int = 2) -> PostProcess:
    scheme = target.compute("MatMul").requant_scheme
    return PostProcess(requant_from_scale(scale, zp, "int8", scheme))


def weights(seed: int = 1, k: int = K, n: int = N) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    b = rng.integers(-2000, 2000, n).astype(np.int32)
    return w, b


def matmul_model(post, structure: str = "plain", seed: int = 1, m: int = M) -> LoweredModel:
    """x[m,K] int8 -> NpuMatMul(post) -> y."""
    w, b = weights(seed)
    step = NpuMatMul(
        name="mm",
        a="x",
        w="w",
        out="y",
        a_zp=3,
        w_zp=0,
        bias="b",
        a_type="int8",
        w_type="int8",
        post=post,
        structure=structure,
        onnx_nodes=("MatMul_0", "Sigmoid_0"),
    )
    return LoweredModel([TensorSpec("x", "int8", (m, K))], ["y"], {"w": w, "b": b}, [step])


def matmul_chain(
    ws: Sequence[np.ndarray], posts: Sequence[PostProcess], m: int = M
) -> LoweredModel:
    """x[m, k] int8 -> mm0 -> mm1 -> ... -> y{n-1}: step i multiplies by ws[i] (no zero
    points, no bias) and applies posts[i]; every post must produce int8."""
    steps = [
        NpuMatMul(
            name=f"mm{i}",
            a="x" if i == 0 else f"y{i - 1}",
            w=f"w{i}",
            out=f"y{i}",
            a_zp=0,
            w_zp=0,
            bias=None,
            a_type="int8",
            w_type="int8",
            post=post,
        )
        for i, post in enumerate(posts)
    ]
    consts = {f"w{i}": w for i, w in enumerate(ws)}
    x = TensorSpec("x", "int8", (m, ws[0].shape[0]))
    return LoweredModel([x], [f"y{len(steps) - 1}"], consts, steps)


def x_input(seed: int = 7, m: int = M) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).integers(-128, 128, (m, K)).astype(np.int8)}
