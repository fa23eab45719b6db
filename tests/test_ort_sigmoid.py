"""QLinearSigmoid (com.microsoft): the kernel reproduces ONNX Runtime's tables exactly.

ORT builds the table as dequantize -> MLAS logistic (a float32 rational
approximation, fused multiply-adds on x86-64 AVX2 / ARM64) -> quantize. A plain
float32/float64 sigmoid with round-half-to-even differs in rare entries; the
`sigmoid_mlas` LUT function reproduces ORT (see prover/mlas.py).
"""

from __future__ import annotations

import numpy as np
import ort_models as M
import pytest
from onnx import TensorProto, helper

from prover.lut import LutSpec, build_lut, build_ort_leaky_relu_table, build_ort_sigmoid_table
from prover.mlas import fma32, host_uses_fma, mlas_logistic

FUSED = host_uses_fma()

# (type, x_scale, x_zp, y_scale, y_zp) where a plain float32 sigmoid table differs from
# ORT's (found by scanning 6,000 random pairs on ORT 1.32): regression cases.
PLAIN_SIGMOID_DIFFERS = [
    ("int8", 0.058683063834905624, -21, 0.027862535789608955, -124),
    ("int8", 0.037374746054410934, 5, 0.004148582927882671, -72),
    ("uint8", 0.03470422700047493, 236, 0.0007574085611850023, 153),
    ("uint8", 0.0037762727588415146, 176, 0.002476452151313424, 32),
    ("uint8", 0.020983992144465446, 129, 0.027109233662486076, 132),
    ("uint8", 0.12413983792066574, 123, 0.0003343380521982908, 215),
    ("uint8", 0.26613280177116394, 74, 0.0004454467270988971, 1),
]


def _random_pairs(rng, dtype: str, n: int):
    info = np.iinfo(dtype)
    for _ in range(n):
        xs = float(np.float32(10 ** rng.uniform(-3, 0)))
        ys = float(np.float32(10 ** rng.uniform(-3.5, -1.5)))
        yield (
            xs,
            int(rng.integers(info.min, info.max + 1)),
            ys,
            int(rng.integers(info.min, info.max + 1)),
        )


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_qlinear_sigmoid_tables_match_ort(rng, dtype):
    sess = M.qlinear_lookup("QLinearSigmoid", dtype)
    pairs = list(_random_pairs(rng, dtype, 250))
    # Typical deployment parameters: output scale 1/256 with the zero point at the type's min.
    info = np.iinfo(dtype)
    pairs += [(s, z, 1 / 256, int(info.min)) for s in (0.02, 0.0625, 0.1) for z in (0, info.min)]
    for xs, xz, ys, yz in pairs:
        want = M.run_lookup(sess, dtype, xs, xz, ys, yz)
        got = build_ort_sigmoid_table(xs, xz, dtype, ys, yz, dtype, fused=FUSED)
        bad = np.nonzero(got != want)[0]
        assert bad.size == 0, f"{(xs, xz, ys, yz)}: entries {bad.tolist()} differ"


@pytest.mark.parametrize("case", PLAIN_SIGMOID_DIFFERS, ids=lambda c: f"{c[0]}-{c[1]:.4g}")
def test_plain_sigmoid_differs_where_mlas_matches(case):
    dtype, xs, xz, ys, yz = case
    want = M.run_lookup(M.qlinear_lookup("QLinearSigmoid", dtype), dtype, xs, xz, ys, yz)
    spec = LutSpec(
        function="sigmoid_mlas" if FUSED else "sigmoid_mlas_nofma",
        in_scale=xs,
        in_zp=xz,
        in_type=dtype,
        out_scale=ys,
        out_zp=yz,
        out_type=dtype,
    )
    assert np.array_equal(build_lut(spec), want)
    if FUSED:  # the regression cases were found with the FMA kernel
        plain = build_lut(
            LutSpec(
                function="sigmoid",
                in_scale=xs,
                in_zp=xz,
                in_type=dtype,
                out_scale=ys,
                out_zp=yz,
                out_type=dtype,
                precision="float32",
            )
        )
        assert (plain != want).sum() >= 1


def test_table_index_order_is_a_storage_detail():
    """ORT indexes its table by the raw byte (twos_complement); the logical map is the same."""
    off = build_ort_sigmoid_table(0.05, 3, "int8", 1 / 256, -128, "int8", index_order="offset")
    twos = build_ort_sigmoid_table(
        0.05, 3, "int8", 1 / 256, -128, "int8", index_order="twos_complement"
    )
    assert np.array_equal(off[128:], twos[:128]) and np.array_equal(off[:128], twos[128:])


def _float_sigmoid_session():
    node = helper.make_node("Sigmoid", ["x"], ["y"])
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", M.OPSET)])
    m.ir_version = 10
    return M.session(m.SerializeToString())


def test_mlas_logistic_equals_ort_float_sigmoid(rng):
    """ORT's float Sigmoid runs the same MLAS kernel: bit-equal on 400k float32 inputs."""
    x = np.concatenate(
        [
            rng.uniform(-20, 20, 200_000),
            rng.standard_normal(200_000) * 3,
            [0.0, -0.0, 18.0, -18.0, 18.5, -18.5, 1e-30, -1e-30, 1e30, -1e30],
        ]
    ).astype(np.float32)
    want = _float_sigmoid_session().run(None, {"x": x})[0]
    got = mlas_logistic(x, fused=FUSED)
    assert np.array_equal(got.view(np.int32), want.view(np.int32))
    # The other kernel variant really is different (so the test can tell them apart).
    other = mlas_logistic(x, fused=not FUSED)
    assert not np.array_equal(other.view(np.int32), want.view(np.int32))


def test_fma32_single_rounding(rng):
    """fma32 rounds a*b+c once: checked against exact rational arithmetic."""
    from fractions import Fraction

    a = rng.standard_normal(3000).astype(np.float32)
    b = rng.standard_normal(3000).astype(np.float32)
    c = (rng.standard_normal(3000) * 1e-3).astype(np.float32)
    # Cases where a*b + c lands next to a float32 tie are the hard ones.
    a[:3] = np.float32(1 + 2**-23)
    b[:3] = np.float32(1 + 2**-23)
    c[:3] = [np.float32(-1), np.float32(-(2**-22)), np.float32(2**-48)]
    # (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 is a float32 tie; +-2^-80 decides it. Rounding
    # through float64 first would land on the tie and round to even: wrong for +2^-80.
    a[3:5] = b[3:5] = np.float32(1 + 2**-12)
    c[3:5] = [np.float32(2**-80), np.float32(-(2**-80))]
    got = fma32(a, b, c)
    assert got[3] == np.float32(1 + 2**-11 + 2**-23) and got[4] == np.float32(1 + 2**-11)
    for i in range(a.size):
        exact = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        want = _round_f32(exact)
        assert got[i] == want, (a[i], b[i], c[i])


def test_fma32_exact_float64_sums(rng):
    """Where every a*b + c is exact in float64 (QLinearAdd's operands: 8-bit integers times a
    float32 ratio plus a float32 of like size), the one rounding to float32 is the FMA's:
    checked against exact rational arithmetic, ties included."""
    from fractions import Fraction

    a = rng.integers(0, 256, 2000).astype(np.float32)
    b = np.float32(rng.uniform(1e-3, 1e-1))
    c = (rng.uniform(-30, 30, 2000)).astype(np.float32)
    a[:2], c[:2] = np.float32(1), [np.float32(2**24 + 1) - b, np.float32(1.5)]  # near ties
    p = a.astype(np.float64) * float(b)
    s = p + c.astype(np.float64)
    bv = s - p  # TwoSum's error of every sum is 0: fma32 takes its short path
    assert not ((p - (s - bv)) + (c.astype(np.float64) - bv)).any()
    got = fma32(a, b, c)
    for i in range(a.size):
        exact = Fraction(float(a[i])) * Fraction(float(b)) + Fraction(float(c[i]))
        assert got[i] == _round_f32(exact), (a[i], b, c[i])


def _round_f32(q) -> np.float32:
    """Correct round-half-even of a rational to float32 (via neighbours, no double rounding)."""
    from fractions import Fraction

    f = np.float32(float(q))  # within one ulp; then fix up
    cands = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
    dist = [abs(Fraction(float(v)) - q) for v in cands]
    best = min(dist)
    ties = [v for v, d in zip(cands, dist, strict=True) if d == best]
    if len(ties) == 1:
        return ties[0]
    return next(v for v in ties if (np.array(v).view(np.int32) & 1) == 0)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_qlinear_leaky_relu_tables_match_ort(rng, dtype):
    for alpha in (0.01, 0.1, 0.3333, 2.5):
        sess = M.qlinear_lookup("QLinearLeakyRelu", dtype, alpha=alpha)
        for xs, xz, ys, yz in _random_pairs(rng, dtype, 30):
            ys = float(np.float32(xs * 10 ** rng.uniform(-0.5, 0.5)))
            want = M.run_lookup(sess, dtype, xs, xz, ys, yz)
            got = build_ort_leaky_relu_table(xs, xz, dtype, ys, yz, dtype, alpha)
            assert np.array_equal(got, want), (alpha, xs, xz, ys, yz)


def _qdq_sigmoid_session(dtype, xs, xz, ys, yz):
    """DequantizeLinear -> Sigmoid -> QuantizeLinear with constant parameters."""
    et = M.ELEM[dtype]
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["f"]),
        helper.make_node("Sigmoid", ["f"], ["g"]),
        helper.make_node("QuantizeLinear", ["g", "ys", "yz"], ["y"]),
    ]
    inits = [
        helper.make_tensor("xs", TensorProto.FLOAT, [], [xs]),
        helper.make_tensor("xz", et, [], [xz]),
        helper.make_tensor("ys", TensorProto.FLOAT, [], [ys]),
        helper.make_tensor("yz", et, [], [yz]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", et, [256])],
        [helper.make_tensor_value_info("y", et, [256])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", M.OPSET)])
    m.ir_version = 10
    return M.session(m.SerializeToString())


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_qdq_sigmoid_equals_the_qlinear_table(rng, dtype):
    """Unfused QDQ Sigmoid in ORT (optimizations off) computes the same table."""
    info = np.iinfo(dtype)
    x = np.arange(info.min, info.max + 1).astype(dtype)
    pairs = list(_random_pairs(rng, dtype, 25)) + [
        c[1:] for c in PLAIN_SIGMOID_DIFFERS if c[0] == dtype
    ]
    for xs, xz, ys, yz in pairs:
        want = _qdq_sigmoid_session(dtype, xs, xz, ys, yz).run(None, {"x": x})[0].astype(np.int64)
        got = build_ort_sigmoid_table(xs, xz, dtype, ys, yz, dtype, fused=FUSED)
        assert np.array_equal(got, want), (xs, xz, ys, yz)
