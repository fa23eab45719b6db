"""Bad kernel input raises KernelError with a clear one-line message, never a wrong answer."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prover import lut as L
from prover import matmul as MM
from prover import requant as R
from prover.domain import NUMPY, Z3, KernelError
from prover.inttypes import INT8, UINT8, int_type, wrap
from prover.primitives import primitive
from prover.quantize import dequantize_linear, quantize_linear
from prover.staircase import monotone_thresholds
from prover.terms import Var, evaluate, op

X = np.arange(-5, 5, dtype=np.int64)
SIG = dict(
    function="sigmoid", in_scale=0.1, in_zp=0, in_type="int8",
    out_scale=1 / 256, out_zp=-128, out_type="int8",
)  # fmt: skip

CASES = {
    "shift too large": (lambda: R.mbqm(NUMPY, X, 1 << 30, 32), "shift 32 out of range"),
    "shift too small": (lambda: R.mbqm(NUMPY, X, 1 << 30, -32), "shift -32 out of range"),
    "single-rounding shift 31": (
        lambda: R.single_round(NUMPY, X, 1 << 30, 31),
        "shift 31 out of range",
    ),
    "multiplier 2^31": (lambda: R.requant_double(NUMPY, X, 1 << 31, 0, 0, INT8), "int32"),
    "negative multiplier": (lambda: R.requant_single(NUMPY, X, -1, 0, 0, INT8), "int32"),
    "float multiplier": (lambda: R.check_multiplier(1.5, 0), "integers"),
    "rdbpot exponent 32": (lambda: R.rdbpot(NUMPY, X, 32), "exponent 32"),
    "rdbpot exponent -1": (lambda: R.rdbpot(NUMPY, X, -1), "exponent -1"),
    "LUT of 255 entries": (
        lambda: L.apply_lut(NUMPY, [0] * 255, X, INT8, "offset"),
        "255 entries",
    ),
    "LUT of 257 entries (Z3)": (
        lambda: L.apply_lut(Z3, [0] * 257, Z3.var("x"), INT8, "offset"),
        "257 entries",
    ),
    "check_table size": (lambda: L.check_table([0] * 16, INT8, INT8), "256 entries"),
    "check_table range": (lambda: L.check_table([300] * 256, INT8, UINT8), "uint8"),
    "unknown type": (lambda: int_type("int7"), "unknown integer type 'int7'"),
    "unknown type in a term": (
        lambda: evaluate(op("saturate", Var("x"), type="int7"), NUMPY, {"x": X}),
        "int7",
    ),
    "unknown index order": (
        lambda: L.apply_lut(NUMPY, [0] * 256, X, INT8, "reversed"),
        "index order 'reversed'",
    ),
    "unknown rounding": (lambda: L.build_lut(L.LutSpec(**SIG, rounding="up")), "rounding 'up'"),
    "unknown precision": (
        lambda: L.build_lut(L.LutSpec(**SIG, precision="float16")),
        "precision 'float16'",
    ),
    "unknown LUT function": (
        lambda: L.build_lut(L.LutSpec(**{**SIG, "function": "softplus"})),
        "softplus",
    ),
    "LUT input wider than 8 bits": (
        lambda: L.build_lut(L.LutSpec(**{**SIG, "in_type": "int16"})),
        "int16",
    ),
    "unknown primitive": (lambda: primitive("requantize"), "unknown primitive 'requantize'"),
    "requant zero point out of int8": (
        lambda: R.requant_double(NUMPY, X, 1 << 30, 0, 200, INT8),
        "zero point 200",
    ),
    "requant_float zero point out of uint8": (
        lambda: R.requant_float(NUMPY, X, 0.5, -1, UINT8),
        "zero point -1",
    ),
    "LUT input zero point": (
        lambda: L.build_lut(L.LutSpec(**{**SIG, "in_zp": 128})),
        "input zero point 128",
    ),
    "LUT output zero point": (
        lambda: L.build_lut(L.LutSpec(**{**SIG, "out_zp": -129})),
        "output zero point -129",
    ),
    "quantize zero point": (lambda: quantize_linear([1.0], 0.1, 300, "uint8"), "zero point"),
    "requant_float scale 0": (lambda: R.requant_float(NUMPY, X, 0.0, 0, INT8), "positive"),
    "requant_float scale -1": (lambda: R.requant_float(Z3, Z3.var("a"), -1.0, 0, INT8), "positive"),
    "requant_float scale nan": (lambda: R.requant_float(NUMPY, X, math.nan, 0, INT8), "positive"),
    "requant_float scale inf": (lambda: R.requant_float(NUMPY, X, math.inf, 0, INT8), "positive"),
    "requant_float scale underflows float32": (
        lambda: R.requant_float(NUMPY, X, 1e-50, 0, INT8),
        "positive in float32",
    ),
    "LUT scale 0": (lambda: L.build_lut(L.LutSpec(**{**SIG, "out_scale": 0.0})), "positive"),
    "LUT scale underflows float32": (
        lambda: L.build_lut(L.LutSpec(**{**SIG, "in_scale": 1e-60})),
        "float32",
    ),
    "quantize scale 0": (lambda: quantize_linear([1.0], 0.0, 0, "int8"), "positive"),
    "dequantize scale -1": (lambda: dequantize_linear([1], -1.0, 0), "positive"),
    "quantize NaN input": (lambda: quantize_linear([math.nan], 0.1, 0, "int8"), "NaN"),
    "per-axis scale length": (
        lambda: quantize_linear(np.zeros((2, 3)), [0.1, 0.2], [0, 0], "int8", axis=1),
        "2 entries",
    ),
    "per-axis scale without axis": (
        lambda: dequantize_linear(np.zeros((2, 3)), [0.1, 0.2, 0.3], 0),
        "needs an axis",
    ),
    "quantize_multiplier negative": (lambda: R.quantize_multiplier(-0.5), "non-negative"),
    "quantize_multiplier nan": (lambda: R.quantize_multiplier(math.nan), "finite"),
    "quantize_multiplier too large": (lambda: R.quantize_multiplier(2.0**40), "too large"),
    "clip lo > hi": (lambda: evaluate(op("clip", Var("x"), lo=3, hi=2), NUMPY, {"x": X}), "min 3"),
    "floordiv by 0": (
        lambda: evaluate(op("floordiv_const", Var("x"), c=0), NUMPY, {"x": X}),
        "non-positive constant 0",
    ),
    "mod by -4": (
        lambda: evaluate(op("mod_const", Var("x"), c=-4), NUMPY, {"x": X}),
        "non-positive constant -4",
    ),
    "dot length mismatch": (lambda: MM.dot(NUMPY, [X, X], [1, 2, 3], 0, 0), "lengths 2 and 3"),
    "weights not 2-D": (
        lambda: MM.accumulator_range(np.zeros(4), 0, INT8, 0),
        "weights must be [K, N]",
    ),
    "accumulator leaves int32": (
        lambda: MM.check_fits_int32(MM.accumulator_range(np.full((140000, 1), 127), 0, INT8, 0)),
        "exceeds int32",
    ),
    "wrap to 64 bits": (lambda: wrap(NUMPY, X, int_type("int64")), "64 bits"),
    "empty staircase interval": (
        lambda: monotone_thresholds(lambda a: a, 0, 1, 5, 4),
        "empty interval",
    ),
    "unbound variable": (lambda: evaluate(Var("acc"), NUMPY, {}), "'acc' is not bound"),
    "LUT index out of range": (
        lambda: evaluate(
            op("lut", Var("x"), table=list(range(256)), in_type="int8", index_order="offset"),
            NUMPY,
            {"x": np.array([127, 128])},
        ),
        "out of range",
    ),
    "Z3 width mismatch": (
        lambda: Z3.lift(__import__("z3").BitVec("n", 32)),
        "width 32",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_raises_kernel_error(name):
    fn, fragment = CASES[name]
    with pytest.raises(KernelError) as info:
        fn()
    msg = str(info.value)
    assert fragment in msg, f"message {msg!r} does not mention {fragment!r}"
    assert "\n" not in msg and msg.strip(), "the message must be one non-empty line"


def test_kernel_error_is_a_value_error():
    assert issubclass(KernelError, ValueError)
