"""ONNX Runtime's `com.microsoft` QLinearAdd and QLinearMul (8-bit, per-tensor), bit for bit.

Both compute in float32, not in the integers, and the exact float operations depend on
the kernel MLAS runs on x86-64 (facts from ORT's qladd.cpp, qladd_avx2.cpp, qlmul.cpp,
measured against ORT 1.32 on AVX-512 + FMA):

QLinearAdd. MLAS calls its kernel on spans: a "span" operand `p` (one value per output)
and an "other" operand `q` that is either a span too or one value for the whole span (a
scalar: the operand is broadcast along the innermost output dimension). With
`r_p = f32(s_p / s_c)`, `r_q = f32(s_q / s_c)`:

- fixed = f32(zp_c) - fma(r_p, zp_p, f32(r_q * zp_q)), then for a scalar
  `q`: fixed = fma(q, r_q, fixed); the value is `fma(p, r_p, fixed)`; for a span `q`:
  `fma(p, r_p, fma(q, r_q, fixed))` (the same value: with FMA only the roles of p and q
  matter, not whether q is a scalar). These fused forms are the AVX2/FMA kernel as ORT's
  x86-64 build compiles it (the compiler contracts the C++ `a*b + c*d` and the
  scalar fold into FMAs: measured, the plain-C reading is off on rare ties);
- without FMA (the SSE2 kernel) every product and sum is rounded separately and the
  span-span order is `(fixed + p*r_p) + q*r_q` (from the source; not measurable here);
- then `_mm_cvtps_epi32` (round half to even; NaN or out of int32 range gives INT32_MIN)
  and saturating packs to int16 and to the 8-bit type.

When the ONNX input A is the broadcast scalar, ORT swaps the operands: the span `p` is B.
For two spans `p` is A. The scales and zero points always travel with their operand.

QLinearMul (one SSE2 kernel on x86-64, no FMA): `ratio = f32(f32(s_a * s_b) / s_c)`,
the exact int32 product `(a - zp_a) * (b - zp_b)`, `cvt(f32(f32(prod) * ratio) + zp_c)`,
saturated to int16 then to the 8-bit type. It is symmetric in its operands.

For obligations both are functions of one 8-bit value with the other operand constant;
`qlinear_binary_table` gives that as a 256-entry table, and `requant_then_binary_*` the
composition with ONNX Runtime's float requantization of an int32 accumulator (what a
QLinearMatMul -> QLinearAdd bias chain computes) as a monotone staircase.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any

import numpy as np

from .domain import Domain, KernelError, NumpyDomain
from .inttypes import INT16, INT32_MAX, INT32_MIN, IntType, int_type
from .mlas import fma32
from .requant import float_requant_thresholds, requant_float_concrete
from .staircase import monotone_thresholds

F32 = np.float32
_F32_INT32_MIN = F32(INT32_MIN)  # -2^31, a float32
_F32_2_31 = F32(2.0**31)  # INT32_MAX + 1, a float32 (INT32_MAX itself is not one)


class BinaryOp(StrEnum):
    """The two quantized element-wise kernels."""

    ADD = "QLinearAdd"
    MUL = "QLinearMul"


class SpanMode(StrEnum):
    """How ORT's broadcast loop hands the operands to the MLAS kernel."""

    GENERAL = "general"  # both spans: p = A, q = B
    A_SCALAR = "a_scalar"  # A broadcast along the innermost dimension: p = B, q = A
    B_SCALAR = "b_scalar"  # B broadcast along the innermost dimension: p = A, q = B


@dataclass(frozen=True, kw_only=True)
class QLinearBinaryParams:
    """Per-tensor scales and zero points of A, B and the output C (all one 8-bit type)."""

    a_scale: float
    a_zp: int
    b_scale: float
    b_zp: int
    c_scale: float
    c_zp: int
    dtype: str  # "uint8" or "int8"

    def __post_init__(self) -> None:
        if self.dtype not in ("uint8", "int8"):
            raise KernelError(
                f"QLinearAdd/QLinearMul are modelled for uint8 and int8, not {self.dtype}"
            )
        t = int_type(self.dtype)
        for name in ("a_zp", "b_zp", "c_zp"):
            if not t.contains(int(getattr(self, name))):
                raise KernelError(f"{name} {getattr(self, name)} outside {self.dtype}")
        for name in ("a_scale", "b_scale", "c_scale"):
            s = float(F32(getattr(self, name)))
            if not np.isfinite(s) or s <= 0.0:
                raise KernelError(f"{name} {getattr(self, name)} must be finite and positive")

    @property
    def out(self) -> IntType:
        return int_type(self.dtype)


def span_mode(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> SpanMode:
    """Which operand ORT treats as a per-span scalar for numpy-broadcast shapes A and B.

    ORT's broadcaster walks the output from its innermost dimension; trailing output
    dimensions of size 1 do not count. The first operand of size 1 in the first real
    dimension is the scalar (A is checked first, as ORT does).
    """
    out = np.broadcast_shapes(tuple(a_shape), tuple(b_shape))
    nd = len(out)
    a = (1,) * (nd - len(a_shape)) + tuple(a_shape)
    b = (1,) * (nd - len(b_shape)) + tuple(b_shape)
    for i in range(nd - 1, -1, -1):
        if out[i] == 1:
            continue
        if a[i] == 1:
            return SpanMode.A_SCALAR
        if b[i] == 1:
            return SpanMode.B_SCALAR
        return SpanMode.GENERAL
    return SpanMode.A_SCALAR  # a single element: ORT's first (input-0-scalar) case


# --- float32 helpers ------------------------------------------------------------------


def cvtps_epi32(x: Any) -> np.ndarray:
    """`_mm_cvtps_epi32`: round half to even; NaN and out-of-range give INT32_MIN."""
    # in float32: the nearest integer of a float32 is one (|x| >= 2^23 is integral), and
    # -2^31 and 2^31 are float32 values, so the range test is exact (NaN fails it)
    r = np.rint(np.asarray(x, dtype=F32))
    ok = (r >= _F32_INT32_MIN) & (r < _F32_2_31)
    return np.where(ok, r, _F32_INT32_MIN).astype(np.int64)


def pack_saturate(r: np.ndarray, out: IntType) -> np.ndarray:
    """`packs_epi32` (to int16) then the 8-bit pack (`packus`/`packs`): two saturations,
    one clip to the intersection of the two ranges."""
    lo, hi = max(INT16.min, out.min), min(INT16.max, out.max)
    return np.clip(np.asarray(r, dtype=np.int64), lo, hi)


def _mul_add(x: Any, y: Any, z: Any, fused: bool) -> np.ndarray:
    """float32 x*y + z, fused (one rounding) or as two float32 operations."""
    if fused:
        return fma32(x, y, z)
    return (F32(x) * np.asarray(y, F32)).astype(F32) + np.asarray(z, F32)


# --- the kernels ---------------------------------------------------------------------


def qladd_kernel(
    p: Any,
    q: Any,
    p_scale: float,
    p_zp: int,
    q_scale: float,
    q_zp: int,
    c_scale: float,
    c_zp: int,
    out: IntType,
    *,
    q_scalar: bool,
    fma: bool = True,
) -> np.ndarray:
    """MLAS's QLinearAdd kernel on a span `p` and a span or scalar `q` (int arrays)."""
    r_p = F32(F32(p_scale) / F32(c_scale))
    r_q = F32(F32(q_scale) / F32(c_scale))
    zp_terms = _mul_add(r_p, F32(p_zp), F32(r_q * F32(q_zp)), fma)
    fixed = F32(F32(c_zp) - F32(zp_terms))
    pf = np.asarray(p, dtype=np.int64).astype(F32)
    qf = np.asarray(q, dtype=np.int64).astype(F32)
    if q_scalar:
        v = _mul_add(pf, r_p, _mul_add(qf, r_q, fixed, fma), fma)
    elif fma:
        v = fma32(pf, r_p, fma32(qf, r_q, fixed))
    else:
        v = ((fixed + (pf * r_p).astype(F32)).astype(F32) + (qf * r_q).astype(F32)).astype(F32)
    return pack_saturate(cvtps_epi32(v), out)


def qlmul_kernel(
    a: Any, b: Any, a_scale: float, a_zp: int, b_scale: float, b_zp: int,
    c_scale: float, c_zp: int, out: IntType,
) -> np.ndarray:  # fmt: skip
    """MLAS's QLinearMul kernel (SSE2 on x86-64: separate float32 multiply and add)."""
    ratio = F32(F32(F32(a_scale) * F32(b_scale)) / F32(c_scale))
    prod = (np.asarray(a, np.int64) - int(a_zp)) * (np.asarray(b, np.int64) - int(b_zp))
    v = prod.astype(F32) * ratio + F32(c_zp)  # float32 throughout: each step one rounding
    return pack_saturate(cvtps_epi32(v), out)


def qlinear_binary(
    op: BinaryOp | str, a: Any, b: Any, params: QLinearBinaryParams, *, fma: bool = True
) -> np.ndarray:
    """ORT's QLinearAdd / QLinearMul on numpy-broadcast integer arrays (int64 result).

    `fma` is the reference profile's `mlas_fma` (the AVX2/FMA QLinearAdd kernel).
    """
    op = BinaryOp(op)
    a64 = np.asarray(a, dtype=np.int64)
    b64 = np.asarray(b, dtype=np.int64)
    out = params.out
    for name, x in (("A", a64), ("B", b64)):
        if x.size and (x.min() < out.min or x.max() > out.max):
            raise KernelError(f"{op} input {name} has values outside {out.name}")
    shape = np.broadcast_shapes(a64.shape, b64.shape)
    a64, b64 = np.broadcast_to(a64, shape), np.broadcast_to(b64, shape)
    return _kernel(op, a64, b64, params, span_mode(np.shape(a), np.shape(b)), fma)


def qlinear_binary_pairs(
    op: BinaryOp | str,
    a: np.ndarray,
    b: np.ndarray,
    params: QLinearBinaryParams,
    *,
    mode: SpanMode,
    fma: bool = True,
) -> np.ndarray:
    """The kernel on same-shape element pairs of A and B, operands placed as ORT's span
    `mode` for the node's shapes places them (the element function of a broadcast op)."""
    return _kernel(BinaryOp(op), a, b, params, SpanMode(mode), fma)


def _kernel(
    op: BinaryOp, a: np.ndarray, b: np.ndarray, p: QLinearBinaryParams, mode: SpanMode, fma: bool
) -> np.ndarray:
    """The MLAS kernel of `op` on same-shape A and B, operands placed as `mode` says."""
    if op is BinaryOp.MUL:
        return qlmul_kernel(a, b, p.a_scale, p.a_zp, p.b_scale, p.b_zp, p.c_scale, p.c_zp, p.out)
    if mode is SpanMode.A_SCALAR:
        return qladd_kernel(
            b, a, p.b_scale, p.b_zp, p.a_scale, p.a_zp, p.c_scale, p.c_zp, p.out,
            q_scalar=True, fma=fma,
        )  # fmt: skip
    return qladd_kernel(
        a, b, p.a_scale, p.a_zp, p.b_scale, p.b_zp, p.c_scale, p.c_zp, p.out,
        q_scalar=mode is SpanMode.B_SCALAR, fma=fma,
    )  # fmt: skip


# --- forms for obligations -----------------------------------------------------------


def qlinear_binary_of(
    op: BinaryOp | str,
    x: Any,
    const: int,
    params: QLinearBinaryParams,
    *,
    x_is_a: bool,
    mode: SpanMode,
    fma: bool = True,
) -> np.ndarray:
    """The element function `x -> op(x, const)` (or `op(const, x)`) of one output element.

    `mode` is the site's `span_mode`; `const` is the other operand's value for this
    element (e.g. a bias column).
    """
    op = BinaryOp(op)
    xs = np.asarray(x, dtype=np.int64)
    c = np.full(xs.shape, int(const), dtype=np.int64)
    a, b = (xs, c) if x_is_a else (c, xs)
    return _kernel(op, a, b, params, mode, fma)


def qlinear_binary_table(
    op: BinaryOp | str,
    const: int,
    params: QLinearBinaryParams,
    *,
    x_is_a: bool,
    mode: SpanMode,
    fma: bool = True,
) -> tuple[int, ...]:
    """`op` as a 256-entry table over the varying operand (index = x - type min)."""
    out = params.out
    xs = np.arange(out.min, out.max + 1, dtype=np.int64)
    t = qlinear_binary_of(op, xs, const, params, x_is_a=x_is_a, mode=mode, fma=fma)
    return tuple(np.asarray(t, dtype=np.int64).tolist())


@dataclass(frozen=True, kw_only=True)
class RequantThenBinary:
    """`acc -> op(requant_float(acc, scale, zp), const)`: a QLinearMatMul output into op."""

    op: BinaryOp
    requant_scale: float  # float32 (a_s * w_s) / y_s of the producer
    const: int
    params: QLinearBinaryParams  # the producer's y_scale/y_zp are the x operand's
    x_is_a: bool
    mode: SpanMode
    fma: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "op", BinaryOp(self.op))

    def _x_params(self) -> tuple[float, int]:
        p = self.params
        return (p.a_scale, p.a_zp) if self.x_is_a else (p.b_scale, p.b_zp)

    def concrete(self, acc: Any) -> np.ndarray:
        """The composition evaluated directly (int64 array)."""
        _, xz = self._x_params()
        mid = requant_float_concrete(acc, F32(self.requant_scale), xz, self.params.out)
        return qlinear_binary_of(
            self.op, mid, self.const, self.params, x_is_a=self.x_is_a, mode=self.mode,
            fma=self.fma,
        )  # fmt: skip

    def increasing(self) -> bool:
        """Whether the composition is non-decreasing in `acc` (else non-increasing).

        QLinearAdd always is (positive ratios; fma, rounding and saturation are
        monotone). QLinearMul follows the sign of `const - zp` of the constant operand.
        """
        if self.op is BinaryOp.ADD:
            return True
        p = self.params
        other_zp = p.b_zp if self.x_is_a else p.a_zp
        return int(self.const) >= int(other_zp)

    def thresholds(self) -> tuple[int, ...]:
        """Staircase thresholds over int32 of the non-decreasing form (see `steps`)."""
        return _binary_thresholds(self)

    def steps(self, d: Domain, acc: Any) -> Any:
        """The composition for an int32 `acc` in any domain, from comparisons only."""
        if isinstance(d, NumpyDomain):
            return self.concrete(acc)
        out = self.params.out
        n = d.step_count(acc, self.thresholds())
        if self.increasing():
            return d.const(out.min) + n
        return d.const(out.max) - n


@lru_cache(maxsize=1024)
def _binary_thresholds(f: RequantThenBinary) -> tuple[int, ...]:
    out = f.params.out
    # Guard: the producer's requantization must itself be a valid staircase.
    _, xz = f._x_params()
    float_requant_thresholds(float(F32(f.requant_scale)), int(xz), out.name)
    if f.increasing():
        g = f.concrete
    else:

        def g(acc: np.ndarray) -> np.ndarray:
            return out.max + out.min - f.concrete(acc)

    t = monotone_thresholds(g, out.min, out.max, INT32_MIN, INT32_MAX)
    return tuple(int(v) for v in t)
