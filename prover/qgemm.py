"""ONNX Runtime's `com.microsoft` QGemm, bit for bit.

Facts (ORT's contrib QGemm kernel and MLAS, measured against ORT 1.32):

- Y = alpha * A' @ B' + C on quantized operands: A [M, K] (or [K, M] with transA) uint8 or
  int8 with a per-tensor zero point; B [K, N] (or [N, K] with transB) uint8 or int8 with a
  per-tensor or per-column ([N]) scale and zero point; C an optional int32 bias of shape
  (), (1,), (N,), (1, N), (M, 1) or (M, N) in units of a_scale * b_scale.
- The int32 accumulator is `C + sum_k (a - a_zp)(b - b_zp)`: the bias initialises the
  output buffer and the GEMM accumulates onto it (exact on VNNI/ARM; a uint8 x int8 GEMM
  on x86 without VNNI saturates raw product pairs, `prover.pair_saturation`).
- The output scale per column is `f32(f32(f32(alpha) * a_scale) * b_scale[n])`, divided
  in float32 by y_scale when there is one; note the order differs from QLinearMatMul's
  `(a_scale * b_scale) / y_scale` (`requant.onnx_requant_scale`).
- With y_scale (and y_zero_point): `saturate(round_half_even(f32(acc) * scale) + y_zp)`,
  ORT's float requantization (`requant.requant_float`): a monotone staircase of `acc`.
- Without: float32 output `f32(f32(acc) * scale)`.

alpha is folded into the scale, so it never changes the integer accumulator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .domain import Domain, KernelError
from .inttypes import INT32_MAX, INT32_MIN, IntType, int_type
from .matmul import matmul_acc
from .reference import Accumulation, ReferenceProfile, get_profile
from .requant import requant_float, requant_float_concrete

F32 = np.float32
QUANT_TYPES = ("uint8", "int8")


@dataclass(frozen=True, kw_only=True)
class QGemmParams:
    """Everything of one QGemm node but its data: scales, zero points, attributes, types."""

    a_type: str
    b_type: str
    a_scale: float
    a_zp: int
    b_scale: tuple[float, ...]  # one (per tensor) or N (per column)
    b_zp: tuple[int, ...]  # same length as b_scale
    y_scale: float | None = None
    y_zp: int | None = None
    y_type: str | None = None  # the quantized output type (= a_type in ORT's kernels)
    alpha: float = 1.0
    trans_a: bool = False
    trans_b: bool = False

    def __post_init__(self) -> None:
        for name in ("a_type", "b_type"):
            if getattr(self, name) not in QUANT_TYPES:
                raise KernelError(f"QGemm {name} must be uint8 or int8, not {getattr(self, name)}")
        if self.a_type == "int8" and self.b_type != "int8":
            raise KernelError("QGemm with int8 A needs int8 B (ORT has no s8u8 kernel)")
        if len(self.b_scale) != len(self.b_zp) or not self.b_scale:
            raise KernelError("QGemm b_scale and b_zero_point must have the same length (1 or N)")
        _check_scale("a_scale", self.a_scale)
        for s in self.b_scale:
            _check_scale("b_scale", s)
        _check_zp("a_zero_point", self.a_zp, self.a_type)
        for z in self.b_zp:
            _check_zp("b_zero_point", z, self.b_type)
        if not np.isfinite(F32(self.alpha)):
            raise KernelError(f"QGemm alpha {self.alpha} must be finite")
        if (self.y_scale is None) != (self.y_zp is None):
            raise KernelError("QGemm y_scale and y_zero_point must be given together")
        if self.y_scale is not None and self.y_zp is not None:
            _check_scale("y_scale", self.y_scale)
            y_type = self.y_type or self.a_type
            if y_type != self.a_type:
                raise KernelError(f"QGemm output type {y_type} must equal A's type {self.a_type}")
            _check_zp("y_zero_point", int(self.y_zp), y_type)
            if F32(self.alpha) <= 0:
                raise KernelError(
                    "QGemm with a quantized output needs alpha > 0 (a positive scale)"
                )

    @property
    def quantized_output(self) -> bool:
        return self.y_scale is not None

    @property
    def out(self) -> IntType:
        """The quantized output type (only with y_scale)."""
        return int_type(self.y_type or self.a_type)


def output_scales(p: QGemmParams) -> np.ndarray:
    """ORT's float32 per-column (or single) output scale: ((alpha * a_s) * b_s) [/ y_s]."""
    s = (F32(F32(p.alpha) * F32(p.a_scale)) * np.asarray(p.b_scale, dtype=F32)).astype(F32)
    if p.y_scale is not None:
        s = (s / F32(p.y_scale)).astype(F32)
    return s


def _check_scale(name: str, v: float) -> None:
    s = float(F32(v))
    if not np.isfinite(s) or s <= 0.0:
        raise KernelError(f"QGemm {name} {v} must be finite and positive in float32")


def _check_zp(name: str, v: int, t: str) -> None:
    if not int_type(t).contains(int(v)):
        raise KernelError(f"QGemm {name} {v} outside the range of {t}")


def _operands(a: Any, b: Any, p: QGemmParams) -> tuple[np.ndarray, np.ndarray]:
    a64 = np.asarray(a, dtype=np.int64)
    b64 = np.asarray(b, dtype=np.int64)
    if a64.ndim != 2 or b64.ndim != 2:
        raise KernelError("QGemm A and B must be 2-D")
    if p.trans_a:
        a64 = a64.T
    if p.trans_b:
        b64 = b64.T
    if a64.shape[1] != b64.shape[0]:
        raise KernelError(f"QGemm inner dimensions differ: {a64.shape} x {b64.shape}")
    if a64.shape[1] == 0:
        raise KernelError("QGemm with K = 0 is not modelled (ORT fills the output specially)")
    for name, x, t in (("A", a64, p.a_type), ("B", b64, p.b_type)):
        it = int_type(t)
        if x.size and (x.min() < it.min or x.max() > it.max):
            raise KernelError(f"QGemm {name} has values outside {t}")
    if len(p.b_zp) not in (1, b64.shape[1]):
        raise KernelError(f"QGemm per-column parameters need N = {b64.shape[1]} entries")
    return a64, b64


def broadcast_bias(c: Any, m: int, n: int) -> np.ndarray:
    """The int32 bias C broadcast to [M, N] as ORT's QGemm allows it."""
    c64 = np.asarray(c, dtype=np.int64)
    if c64.size and (c64.min() < INT32_MIN or c64.max() > INT32_MAX):
        raise KernelError("QGemm bias C must be int32")
    allowed = {(), (1,), (n,), (1, 1), (1, n), (m, 1), (m, n)}
    if c64.shape not in allowed:
        raise KernelError(f"QGemm bias shape {c64.shape} does not broadcast to ({m}, {n})")
    return np.broadcast_to(c64, (m, n))


def qgemm_acc(
    a: Any,
    b: Any,
    p: QGemmParams,
    c: Any = None,
    profile: ReferenceProfile | str = "onnx",
) -> np.ndarray:
    """The int32 accumulator [M, N] as int64: C + (A' - a_zp) @ (B' - b_zp), per `profile`."""
    prof = get_profile(profile) if isinstance(profile, str) else profile
    a64, b64 = _operands(a, b, p)
    m, n = a64.shape[0], b64.shape[1]
    zps = np.asarray(p.b_zp, dtype=np.int64)
    b_zp: np.ndarray | int = zps if zps.size > 1 else int(zps[0])
    bias = None if c is None else broadcast_bias(c, m, n)
    u8s8 = p.a_type == "uint8" and p.b_type == "int8"
    if u8s8 and prof.u8s8_accumulation is Accumulation.PAIR_SATURATING_INT16:
        from .pair_saturation import pair_saturating_acc

        return pair_saturating_acc(a64, b64, p.a_zp, b_zp, bias)
    return matmul_acc(a64, b64, p.a_zp, b_zp, bias)


def qgemm(
    a: Any,
    b: Any,
    p: QGemmParams,
    c: Any = None,
    profile: ReferenceProfile | str = "onnx",
) -> np.ndarray:
    """ORT's QGemm output: int64 values of the quantized type with y_scale, else float32."""
    acc = qgemm_acc(a, b, p, c, profile)
    scale = output_scales(p)
    if p.quantized_output:
        return requant_float_concrete(acc, scale, _y_zp(p), p.out)
    return (acc.astype(F32) * scale).astype(F32)


def qgemm_epilogue(d: Domain, acc: Any, p: QGemmParams, column: int = 0) -> Any:
    """The per-element map of a quantized-output QGemm, acc -> y, in any domain.

    Exactly `requant_float` with the column's QGemm scale: the staircase form applies.
    """
    if not p.quantized_output:
        raise KernelError("a float-output QGemm has no integer epilogue")
    s = output_scales(p)
    scale = s[column] if s.size > 1 else s[0]
    return requant_float(d, acc, float(scale), _y_zp(p), p.out)


def _y_zp(p: QGemmParams) -> int:
    if p.y_zp is None:
        raise KernelError("a float-output QGemm has no output zero point")
    return int(p.y_zp)
