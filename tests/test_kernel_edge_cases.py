"""Named edge cases from DESIGN.md, each a regression test in both interpretations where it applies."""

from __future__ import annotations

import numpy as np
import pytest
import z3

from prover import lut as L
from prover import requant as R
from prover.domain import NUMPY, Z3, KernelError
from prover.inttypes import INT8, INT16, INT32, INT32_MAX, INT32_MIN, UINT8


def _z3_const(e) -> int:
    return z3.simplify(e).as_signed_long()


def test_double_vs_single_rounding_design_example():
    x, m, s = -1998, 1 << 30, -1
    assert R.mbqm(NUMPY, np.int64(x), m, s) == -500
    assert R.single_round(NUMPY, np.int64(x), m, s) == -499
    assert _z3_const(R.mbqm(Z3, Z3.const(x), m, s)) == -500
    assert _z3_const(R.single_round(Z3, Z3.const(x), m, s)) == -499
    assert R.requant_double(NUMPY, np.int64(x), m, s, 0, INT16) == -500
    assert R.requant_single(NUMPY, np.int64(x), m, s, 0, INT16) == -499


def test_mantissa_rounding_to_2_pow_31():
    real = 1.0 - 2.0**-33  # frexp mantissa rounds up to exactly 2^31
    m_bad, s_bad = R.quantize_multiplier_unfixed(real)
    assert (m_bad, s_bad) == (1 << 31, 0)
    with pytest.raises(KernelError, match="does not fit int32"):
        R.check_multiplier(m_bad, s_bad)
    with pytest.raises(KernelError):
        R.mbqm(NUMPY, np.int64(5), m_bad, s_bad)
    m, s = R.quantize_multiplier(real)
    assert (m, s) == (1 << 30, 1)
    R.check_multiplier(m, s)
    xs = np.array([-1000, -1, 0, 1, 12345, 1 << 20], dtype=np.int64)
    assert np.array_equal(R.mbqm(NUMPY, xs, m, s), xs)  # a multiplier of (almost) 1


def test_srdhm_int32_min_squared_saturates():
    a = np.int64(INT32_MIN)
    assert R.srdhm(NUMPY, a, a) == INT32_MAX
    assert _z3_const(R.srdhm(Z3, Z3.const(INT32_MIN), Z3.const(INT32_MIN))) == INT32_MAX
    # One ulp away it is an ordinary (non-saturating) product.
    assert R.srdhm(NUMPY, a, np.int64(INT32_MIN + 1)) == INT32_MAX
    assert R.srdhm(NUMPY, a, np.int64(INT32_MAX)) == -INT32_MAX


def test_int32_to_float32_inexact_above_2_pow_24():
    assert int(np.float32(np.int64((1 << 24) + 1))) == 1 << 24
    scale = 2.0**-17
    acc = int(128.5 * 2**17) + 1  # float32 rounds it (tie to even) down onto the half-step
    assert float(np.float32(acc)) == 128.5 * 2**17
    assert round(acc * scale) == 129  # real arithmetic: 128.5000076 rounds up
    # ONNX Runtime's float32 form: float32(acc) * s = 128.5 exactly, half to even -> 128.
    assert R.requant_float(NUMPY, np.int64(acc), scale, -128, INT8) == 0
    assert _z3_const(R.requant_float(Z3, Z3.const(acc), scale, -128, INT8)) == 0
    # Below 2^24 the conversion is exact and the half-step is not reached.
    small = int(0.5 * 2**17) + 1
    assert R.requant_float(NUMPY, np.int64(small), scale, 0, INT8) == 1


def test_lut_index_order_offset_vs_twos_complement():
    spec = L.LutSpec(
        function="sigmoid",
        in_scale=0.05,
        in_zp=0,
        in_type="int8",
        out_scale=1 / 256,
        out_zp=-128,
        out_type="int8",
        index_order="offset",
    )
    off = L.build_lut(spec)
    twos = L.build_lut(L.LutSpec(**{**spec.__dict__, "index_order": "twos_complement"}))
    assert not np.array_equal(off, twos)
    assert np.array_equal(L.reorder_table(off, INT8, "offset", "twos_complement"), twos)
    x = np.arange(-128, 128)
    ok = L.apply_lut(NUMPY, off, x, INT8, "offset")
    assert np.array_equal(ok, L.apply_lut(NUMPY, twos, x, INT8, "twos_complement"))
    # Reading a table in the wrong order is a real, detectable defect.
    wrong = L.apply_lut(NUMPY, off, x, INT8, "twos_complement")
    assert not np.array_equal(ok, wrong)
    assert L.lut_index(NUMPY, np.int64(-128), INT8, "offset") == 0
    assert L.lut_index(NUMPY, np.int64(-128), INT8, "twos_complement") == 128
    assert L.lut_index(NUMPY, np.int64(-1), INT8, "twos_complement") == 255
    # For an unsigned input type both orders coincide.
    u = L.build_lut(
        L.LutSpec(
            function="sigmoid",
            in_scale=0.05,
            in_zp=128,
            in_type="uint8",
            out_scale=1 / 256,
            out_zp=0,
            out_type="uint8",
        )
    )
    assert np.array_equal(L.reorder_table(u, UINT8, "offset", "twos_complement"), u)


def test_float_constants_rounded_vs_truncated():
    base = dict(
        function="sigmoid", in_scale=0.1, in_zp=0, in_type="int8",
        out_scale=1 / 256, out_zp=-128, out_type="int8",
    )  # fmt: skip
    even = L.build_lut(L.LutSpec(**base, rounding="half_even"))
    trunc = L.build_lut(L.LutSpec(**base, rounding="toward_zero"))
    diff = even != trunc
    assert diff.any()
    # Truncation loses exactly the entries whose fractional part is >= 1/2.
    xs = np.arange(-128, 128)
    y = L.FUNCTIONS["sigmoid"]((xs.astype(np.float32) * np.float32(0.1)), np.float32)
    q = (y / np.float32(1 / 256)).astype(np.float32)
    frac = q - np.floor(q)
    expect = (frac > 0.5) | ((frac == 0.5) & (np.floor(q) % 2 == 1))
    unsat = np.rint(q) - 128 <= 127  # saturation at 127 hides the rounding difference
    assert np.array_equal(diff[unsat], expect[unsat])
    assert not diff[~unsat].any()
    assert np.all(trunc <= even)


def test_half_away_rounding_is_exact_in_float32():
    y = np.array([0.49999997, 0.5, 1.5, 2.5, -0.5, -2.5, 8388609.0, -8388609.0], np.float32)
    got = L.round_with(y, "half_away")
    assert got.tolist() == [0.0, 1.0, 2.0, 3.0, -1.0, -3.0, 8388609.0, -8388609.0]
    assert L.round_with(y, "half_even").tolist() == [0, 0, 2, 2, -0, -2, 8388609, -8388609]


def test_half_away_vs_half_even_lut_differ_only_on_ties():
    base = dict(
        function="identity", in_scale=0.5, in_zp=0, in_type="int8",
        out_scale=1.0, out_zp=0, out_type="int8",
    )  # fmt: skip
    even = L.build_lut(L.LutSpec(**base, rounding="half_even"))
    away = L.build_lut(L.LutSpec(**base, rounding="half_away"))
    xs = np.arange(-128, 128)
    tie = (xs % 2) != 0
    assert np.array_equal(even != away, tie & (np.abs(xs * 0.5) % 2 == 0.5))


def test_zero_point_before_vs_after_rounding():
    base = dict(
        function="identity", in_scale=0.5, in_zp=0, in_type="int8",
        out_scale=1.0, out_type="int8",
    )  # fmt: skip
    after = L.build_lut(L.LutSpec(**base, out_zp=1, zp_placement="after_rounding"))
    before = L.build_lut(L.LutSpec(**base, out_zp=1, zp_placement="before_rounding"))
    assert not np.array_equal(after, before)  # round(2.5)+1 = 3 but round(3.5) = 4
    assert after[128 + 5] == 3 and before[128 + 5] == 4
    # With an even zero point the parity of the tie does not change.
    a0 = L.build_lut(L.LutSpec(**base, out_zp=2, zp_placement="after_rounding"))
    b0 = L.build_lut(L.LutSpec(**base, out_zp=2, zp_placement="before_rounding"))
    assert np.array_equal(a0, b0)


def test_lut_index_out_of_range_is_rejected_not_wrapped():
    table = np.arange(256)
    with pytest.raises(KernelError, match="out of range"):
        L.apply_lut(NUMPY, table, np.array([-129]), INT8, "offset")
    with pytest.raises(KernelError, match="out of range"):
        L.apply_lut(NUMPY, table, np.array([256]), UINT8, "offset")


def test_requant_float_staircase_refuses_wide_outputs():
    with pytest.raises(KernelError, match="at most 16 bits"):
        R.requant_float(Z3, Z3.var("acc"), 0.5, 0, INT32)
    # The concrete form has no such limit.
    assert R.requant_float(NUMPY, np.int64(1 << 20), 0.5, 0, INT32) == 1 << 19


def test_preconditions_are_not_fooled_by_64_bit_wraparound():
    """x = 2^33 with shift 31: x * 2^31 = 2^64 wraps to 0 in a 64-bit word; the precondition
    must still say 'undefined' in both domains (it bounds x itself)."""
    from prover.primitives import PRIMITIVES

    huge = [1 << 33, -(1 << 33), (1 << 62), INT32_MAX + 1, INT32_MIN - 1]
    x = Z3.var("x")
    cases = [
        ("requant_double", dict(multiplier=1 << 30, shift=31, zp=0, out="int8")),
        ("requant_single", dict(multiplier=1 << 30, shift=30, zp=0, out="int8")),
        ("requant_float", dict(scale=0.5, zp=0, out="int8")),
    ]
    for name, kw in cases:
        pre = PRIMITIVES[name].precondition
        assert not np.any(pre(NUMPY, np.array(huge, dtype=np.int64), **kw)), name
        for v in huge:
            sym = z3.simplify(z3.substitute(pre(Z3, x, **kw), (x, Z3.const(v))))
            assert z3.is_false(sym), (name, v)
        # and in-range values satisfy it (with shift 31 only -1 and 0 do)
        assert bool(pre(NUMPY, np.int64(-1), **kw)) and bool(pre(NUMPY, np.int64(0), **kw))


def test_mbqm_on_int64_arrays_is_the_composition():
    """The array form of MBQM (`requant._mbqm_int64`) is SRDHM then RDBPOT element for
    element, int64 wrap-around included, for every shift and for multipliers at the ends."""
    rng = np.random.default_rng(7)
    edges = [0, 1, -1, INT32_MIN, INT32_MAX, INT32_MIN - 1, INT32_MAX + 1, -(2**63), 2**63 - 1]
    xs = np.concatenate([
        np.array(edges, dtype=np.int64),
        rng.integers(-(2**63), 2**63 - 1, 500, dtype=np.int64),
        rng.integers(INT32_MIN, INT32_MAX, 500, dtype=np.int64),
        rng.integers(-5000, 5000, 500, dtype=np.int64),
    ])  # fmt: skip
    for m in (0, 1, 1 << 30, 1518500250, INT32_MAX):
        for s in range(-31, 32):
            left, right = max(s, 0), max(-s, 0)
            with np.errstate(all="ignore"):
                want = R.rdbpot(NUMPY, R.srdhm(NUMPY, xs * (1 << left), np.int64(m)), right)
                got = R.mbqm(NUMPY, xs, m, s)
            assert got.dtype == np.int64 and np.array_equal(got, want), (m, s)
    # a scalar and a 0-d array take the composition itself
    assert R.mbqm(NUMPY, np.int64(-1998), 1 << 30, -1) == -500
    assert R.mbqm(NUMPY, np.array(-1998, dtype=np.int64), 1 << 30, -1) == -500
