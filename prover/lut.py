"""Lookup tables: application (symbolic and concrete) and construction from a float function.

Compilers build LUTs differently; every difference that changes a table entry
is a parameter of `LutSpec`, never an assumption:

- `rounding`: `half_even` (ONNX Runtime), `half_away` (std::round), `toward_zero`
  (the known "folded by truncation" defect);
- `zp_placement`: zero point added `after_rounding` (ONNX QuantizeLinear) or
  `before_rounding` (round(y/s + zp));
- `precision`: evaluate the function in `float32` or `float64`;
- `index_order`: `offset` (index = x - type_min, i.e. x+128 for int8) or
  `twos_complement` (index = x & 0xFF, i.e. x<0 ? 256+x : x).

ONNX Runtime's QLinearSigmoid table (contrib QLinearLookup) is exactly
`LutSpec(function="sigmoid_mlas", precision="float32", rounding="half_even",
zp_placement="after_rounding")`: dequantize in float32 (`x_scale * float(x - x_zp)`),
MLAS's logistic (`prover.mlas`, the FMA form on x86-64 AVX2/ARM64;
`sigmoid_mlas_nofma` is the portable SSE2 form), then ONNX Runtime's quantize
(`x / y_scale` in float32, round half to even, + zero point, saturate). ONNX
Runtime stores that table in `twos_complement` order (indexed by the raw byte);
the logical map from input to output does not depend on the order.
`build_ort_sigmoid_table` builds it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .domain import NUMPY, Domain, KernelError
from .inttypes import IntType, int_type
from .mlas import mlas_logistic, mlas_tanh

INDEX_ORDERS = ("offset", "twos_complement")
ROUNDINGS = ("half_even", "half_away", "toward_zero")
ZP_PLACEMENTS = ("after_rounding", "before_rounding")
PRECISIONS = ("float32", "float64")


def lut_index(d: Domain, x: Any, in_type: IntType, index_order: str) -> Any:
    """Physical table index of the integer `x` of type `in_type`."""
    if index_order == "offset":
        return x - in_type.min
    if index_order == "twos_complement":
        return d.band(x, in_type.size - 1)
    raise KernelError(f"unknown LUT index order {index_order!r}; known: {INDEX_ORDERS}")


def apply_lut(d: Domain, table: Sequence[int], x: Any, in_type: IntType, index_order: str) -> Any:
    """`table[index(x)]`: the table must have exactly one entry per value of `in_type`."""
    if len(table) != in_type.size:
        raise KernelError(
            f"LUT has {len(table)} entries; a {in_type.name} input needs exactly {in_type.size}"
        )
    return d.lut(table, lut_index(d, x, in_type, index_order))


def reorder_table(
    table: Sequence[int] | np.ndarray, in_type: IntType, src: str, dst: str
) -> np.ndarray:
    """The same logical table stored in another index order."""
    xs = np.arange(in_type.min, in_type.max + 1, dtype=np.int64)
    logical = np.asarray(table, dtype=np.int64)[lut_index(NUMPY, xs, in_type, src)]
    return _by_index_order(logical, xs, in_type, dst)


# --- float functions --------------------------------------------------------------------


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64))


def _sigmoid(x, ft):
    one = ft(1)
    return one / (one + np.exp(-x))


def _gelu(x, ft):
    return (ft(0.5) * x * (ft(1) + _erf(x / ft(math.sqrt(2.0))).astype(ft))).astype(ft)


def _gelu_tanh(x, ft):
    c = ft(math.sqrt(2.0 / math.pi))
    return ft(0.5) * x * (ft(1) + np.tanh(c * (x + ft(0.044715) * x * x * x)))


LOADED_TABLE = "table"


def _loaded(x: np.ndarray, ft: type) -> np.ndarray:
    raise KernelError(f"a {LOADED_TABLE!r} LUT is loaded as given, not built from a function")


FUNCTIONS: dict[str, Callable[[np.ndarray, type], np.ndarray]] = {
    "sigmoid": _sigmoid,
    # ONNX Runtime's logistic (always float32, whatever `precision` says).
    "sigmoid_mlas": lambda x, ft: mlas_logistic(x, fused=True),
    "sigmoid_mlas_nofma": lambda x, ft: mlas_logistic(x, fused=False),
    "tanh_mlas": lambda x, ft: mlas_tanh(x, fused=True),
    "tanh_mlas_nofma": lambda x, ft: mlas_tanh(x, fused=False),
    "tanh": lambda x, ft: np.tanh(x),
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
    "silu": lambda x, ft: x * _sigmoid(x, ft),
    "hardsigmoid": lambda x, ft: np.clip(x / ft(6) + ft(0.5), ft(0), ft(1)),
    "hardswish": lambda x, ft: x * np.clip(x / ft(6) + ft(0.5), ft(0), ft(1)),
    "exp": lambda x, ft: np.exp(x),
    "relu": lambda x, ft: np.maximum(x, ft(0)),
    "identity": lambda x, ft: x,
    # A table the postprocessor loads as given (the reference's own table of a unary
    # region): a target declaring it takes any table of its size; nothing builds it.
    "table": _loaded,
}


@dataclass(frozen=True, kw_only=True)
class LutSpec:
    """Everything that determines a quantized activation table."""

    function: str
    in_scale: float
    in_zp: int
    in_type: str
    out_scale: float
    out_zp: int
    out_type: str
    rounding: str = "half_even"
    zp_placement: str = "after_rounding"
    precision: str = "float32"
    index_order: str = "offset"

    def validate(self) -> None:
        if self.function not in FUNCTIONS:
            raise KernelError(f"unknown LUT function {self.function!r}; known: {sorted(FUNCTIONS)}")
        for val, allowed, what in (
            (self.rounding, ROUNDINGS, "rounding"),
            (self.zp_placement, ZP_PLACEMENTS, "zero-point placement"),
            (self.precision, PRECISIONS, "precision"),
            (self.index_order, INDEX_ORDERS, "index order"),
        ):
            if val not in allowed:
                raise KernelError(f"unknown {what} {val!r}; known: {allowed}")
        for s in (self.in_scale, self.out_scale):
            try:
                with np.errstate(over="ignore"):
                    s32 = float(np.float32(s))
            except (TypeError, ValueError):
                s32 = math.nan
            if not (math.isfinite(s32) and s32 > 0):
                raise KernelError(f"LUT scale {s} must be finite and positive in float32")
        it, ot = int_type(self.in_type), int_type(self.out_type)
        if it.bits > 8:
            raise KernelError(f"LUT input type {it.name} has more than 256 values")
        if not it.contains(self.in_zp):
            raise KernelError(f"LUT input zero point {self.in_zp} outside the range of {it.name}")
        if not ot.contains(self.out_zp):
            raise KernelError(f"LUT output zero point {self.out_zp} outside the range of {ot.name}")


def round_with(y: np.ndarray, rounding: str) -> np.ndarray:
    """Round to an integer-valued float with the named rounding mode."""
    if rounding == "half_even":
        return np.rint(y)
    if rounding == "half_away":
        # Not floor(|y| + 0.5): that addition itself rounds (0.49999997f + 0.5f == 1.0f,
        # and above 2^23 it can land on the next integer). The fraction is exact.
        a = np.abs(y)
        fl = np.floor(a)
        return np.sign(y) * np.where(a - fl >= 0.5, fl + 1, fl)
    if rounding == "toward_zero":
        return np.trunc(y)
    raise KernelError(f"unknown rounding {rounding!r}; known: {ROUNDINGS}")


def build_lut(spec: LutSpec) -> np.ndarray:
    """The table of `spec` in its physical index order (int64 entries)."""
    spec.validate()
    it, ot = int_type(spec.in_type), int_type(spec.out_type)
    ft: type[np.floating[Any]] = np.float32 if spec.precision == "float32" else np.float64
    xs = np.arange(it.min, it.max + 1, dtype=np.int64)
    with np.errstate(over="ignore"):  # +-inf saturates the table, as in ONNX Runtime
        real = (xs - spec.in_zp).astype(ft) * ft(spec.in_scale)
        y = np.asarray(FUNCTIONS[spec.function](real, ft), dtype=ft)
        q = y / ft(spec.out_scale)
    if np.any(np.isnan(q)):
        raise KernelError(f"LUT function {spec.function} gives NaN on the input range of {spec}")
    if spec.zp_placement == "after_rounding":
        r = round_with(q, spec.rounding).astype(np.float64) + spec.out_zp
    else:
        r = round_with(q + ft(spec.out_zp), spec.rounding).astype(np.float64)
    logical = np.clip(r, ot.min, ot.max).astype(np.int64)
    return _by_index_order(logical, xs, it, spec.index_order)


def _by_index_order(
    logical: np.ndarray, xs: np.ndarray, it: IntType, index_order: str
) -> np.ndarray:
    """The table holding `logical[i]` (the entry for input `xs[i]`) at its `index_order` slot."""
    out = np.empty(it.size, dtype=np.int64)
    out[lut_index(NUMPY, xs, it, index_order)] = logical
    return out


def _checked_identity_spec(
    in_scale: float,
    in_zp: int,
    in_type: str,
    out_scale: float,
    out_zp: int,
    out_type: str,
    index_order: str,
) -> LutSpec:
    """The validated `identity` spec of an ORT table builder (its types, zero points, order)."""
    spec = LutSpec(
        function="identity",
        in_scale=float(in_scale),
        in_zp=int(in_zp),
        in_type=in_type,
        out_scale=float(out_scale),
        out_zp=int(out_zp),
        out_type=out_type,
        index_order=index_order,
    )
    spec.validate()
    return spec


def build_ort_sigmoid_table(
    in_scale: float,
    in_zp: int,
    in_type: str,
    out_scale: float,
    out_zp: int,
    out_type: str,
    *,
    index_order: str = "offset",
    fused: bool = True,
) -> np.ndarray:
    """ONNX Runtime's QLinearSigmoid table (see the module docstring), in `index_order`.

    `fused=True` reproduces the FMA kernel ONNX Runtime runs on x86-64 with AVX2
    and on ARM64; `fused=False` the portable SSE2 kernel.
    """
    return build_lut(
        LutSpec(
            function="sigmoid_mlas" if fused else "sigmoid_mlas_nofma",
            in_scale=float(in_scale),
            in_zp=int(in_zp),
            in_type=in_type,
            out_scale=float(out_scale),
            out_zp=int(out_zp),
            out_type=out_type,
            rounding="half_even",
            zp_placement="after_rounding",
            precision="float32",
            index_order=index_order,
        )
    )


def build_ort_leaky_relu_table(
    in_scale: float,
    in_zp: int,
    in_type: str,
    out_scale: float,
    out_zp: int,
    out_type: str,
    alpha: float = 0.01,
    *,
    index_order: str = "offset",
) -> np.ndarray:
    """ONNX Runtime's QLinearLeakyRelu table: `v >= 0 ? v : alpha * v` in float32.

    Dequantize and quantize exactly as for `build_ort_sigmoid_table`.
    """
    spec = _checked_identity_spec(
        in_scale, in_zp, in_type, out_scale, out_zp, out_type, index_order
    )
    it, ot = int_type(in_type), int_type(out_type)
    xs = np.arange(it.min, it.max + 1, dtype=np.int64)
    with np.errstate(over="ignore", invalid="ignore"):  # +-inf saturates, as in ORT
        v = (xs - spec.in_zp).astype(np.float32) * np.float32(spec.in_scale)
        y = np.where(v >= np.float32(0), v, np.float32(alpha) * v).astype(np.float32)
        q = round_with(y / np.float32(spec.out_scale), "half_even")
    if np.any(np.isnan(q)):  # alpha 0 times -inf: no table entry ORT would define
        raise KernelError(
            "LeakyRelu gives NaN on the input range (alpha 0 times an infinite input)"
        )
    q = q.astype(np.float64) + spec.out_zp
    logical = np.clip(q, ot.min, ot.max).astype(np.int64)
    return _by_index_order(logical, xs, it, index_order)


SCALE_TYPES = ("float32", "float16")
QDQ_ACTIVATIONS = ("sigmoid", "tanh", "relu")


def build_ort_qdq_table(
    function: str,
    in_scale: float,
    in_zp: int,
    in_type: str,
    out_scale: float,
    out_zp: int,
    out_type: str,
    *,
    fused: bool = True,
    scale_type: str = "float32",
    quantize_precision: str = "float32",
    dequantize_type: str | None = None,
    index_order: str = "offset",
) -> np.ndarray:
    """ONNX Runtime's CPU table for DequantizeLinear -> Sigmoid|Tanh|Relu -> QuantizeLinear.

    `scale_type` is the element type of both scales (ONNX ties DequantizeLinear's output,
    the activation and QuantizeLinear's input to it):

    - `float32`: `float(x - zp) * scale`, the MLAS logistic/tanh (`fused` as in
      `build_ort_sigmoid_table`), `y / y_scale` in float32, round half to even, + zero
      point, saturate (identical to the QLinear table construction);
    - `float16`: the dequantized value is rounded to float16 (`(x - zp) * scale` is exact
      in float32, so this is also the float16 product); the activation runs on that value
      widened to float32 through the float32 MLAS kernel (ORT's CPU provider has no float16
      kernel for these ops and inserts casts) and its result is rounded to float16;
      QuantizeLinear divides in `quantize_precision` and rounds half to even, adds the zero
      point and saturates. ONNX Runtime divides in float32 up to QuantizeLinear-21 and in
      float16 (the scale's type, QuantizeLinear-23's default `precision`) from opset 23 on.

    `dequantize_type` (default: `scale_type`) is the type DequantizeLinear's output has in
    the graph ONNX Runtime runs. ORT's CPU provider casts float16 islands to float32 and
    places the cast by context (`compiler.f16_context`): either after DequantizeLinear (its
    output rounded to float16, `float16`) or on its scale (DequantizeLinear computes
    `float(x - zp) * float(scale)` in float32 and its output is never rounded to float16,
    `float32`); the activation's result is rounded to float16 either way.

    Measured against ONNX Runtime 1.32 (x86-64, AVX2/FMA) at optimisation levels off,
    basic and all: bit-identical tables (tests/test_qdq_float16.py).
    """
    if function not in QDQ_ACTIVATIONS:
        raise KernelError(f"unknown QDQ activation {function!r}; known: {QDQ_ACTIVATIONS}")
    for t in (scale_type, quantize_precision):
        if t not in SCALE_TYPES:
            raise KernelError(f"unsupported scale type {t!r}; known: {SCALE_TYPES}")
    if scale_type == "float32" and quantize_precision != "float32":
        raise KernelError("a float32 scale is divided in float32")
    dq_type = scale_type if dequantize_type is None else dequantize_type
    if dq_type not in SCALE_TYPES or (scale_type == "float32" and dq_type != "float32"):
        raise KernelError(f"unsupported dequantize type {dq_type!r} for {scale_type} scales")
    ft = np.float16 if scale_type == "float16" else np.float32
    with np.errstate(over="ignore"):
        xs_t, ys_t = ft(in_scale), ft(out_scale)
    for s, s_t in ((in_scale, xs_t), (out_scale, ys_t)):
        if not (math.isfinite(float(s_t)) and float(s_t) > 0 and float(s_t) == float(s)):
            raise KernelError(f"scale {s} is not a finite positive {scale_type}")
    _checked_identity_spec(in_scale, in_zp, in_type, out_scale, out_zp, out_type, index_order)
    it, ot = int_type(in_type), int_type(out_type)
    xs = np.arange(it.min, it.max + 1, dtype=np.int64)
    with np.errstate(over="ignore"):
        dft = np.float16 if dq_type == "float16" else np.float32
        real = ((xs - int(in_zp)).astype(np.float32) * np.float32(xs_t)).astype(dft)
        v = real.astype(np.float32)
        if function == "sigmoid":
            y = mlas_logistic(v, fused=fused)
        elif function == "tanh":
            y = mlas_tanh(v, fused=fused)
        else:
            y = np.maximum(v, np.float32(0))
        y = np.asarray(y, dtype=np.float32).astype(ft).astype(np.float32)
        q = y / np.float32(ys_t)
        if quantize_precision == "float16":
            # float32 has more than 2*11+2 bits: rounding its quotient to float16 is the
            # correctly rounded float16 quotient.
            q = q.astype(np.float16).astype(np.float32)
    if np.any(np.isnan(q)):
        raise KernelError(f"QDQ {function} gives NaN on the input range")
    r = np.rint(q).astype(np.float64) + int(out_zp)
    logical = np.clip(r, ot.min, ot.max).astype(np.int64)
    return _by_index_order(logical, xs, it, index_order)


def check_table(table: Sequence[int], in_type: IntType, out_type: IntType) -> None:
    """Raise unless `table` has one entry per input value, each inside `out_type`."""
    t = np.asarray(table)
    if t.ndim != 1 or t.shape[0] != in_type.size:
        raise KernelError(f"LUT must have {in_type.size} entries, got shape {t.shape}")
    if t.min() < out_type.min or t.max() > out_type.max:
        raise KernelError(f"LUT entries outside the range of {out_type.name}")
