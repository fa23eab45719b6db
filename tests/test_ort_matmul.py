"""QLinearMatMul and MatMulInteger: the kernel (exact int accumulation + float32 requant) equals ORT.

Documents the differences between ONNX Runtime and the ONNX spec / reference
implementation found on the way; the kernel follows ONNX Runtime. uint8 x int8 is
compared through the reference profile this host's ORT has (`ort-host`: exact with
VNNI, int16 pair saturation on x86 without it), so the tests hold on every CPU.
"""

from __future__ import annotations

import numpy as np
import onnx
import ort_models as M
import pytest
from onnx.reference import ReferenceEvaluator

from compiler.ort.reference_host import host_profile
from prover.inttypes import int_type
from prover.matmul import matmul_acc
from prover.pair_saturation import pair_saturating_acc, saturation_excess
from prover.reference import Accumulation
from prover.requant import onnx_requant_scale, requant_float_concrete

TYPE_PAIRS = [("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8")]


def _rand(rng, dtype: str, shape) -> np.ndarray:
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, shape)
    # Sprinkle extremes: they make the largest |acc| (and would expose int16 saturation).
    ext = rng.random(shape) < 0.2
    x[ext] = rng.choice([info.min, info.max], size=int(ext.sum()))
    return x.astype(dtype)


def host_acc(a, b, a_zp=0, b_zp=0) -> np.ndarray:
    """The accumulator ORT computes on this host: uint8 x int8 through the host's profile."""
    u8s8 = np.asarray(a).dtype == np.uint8 and np.asarray(b).dtype == np.int8
    saturating = host_profile().u8s8_accumulation == Accumulation.PAIR_SATURATING_INT16
    if u8s8 and saturating:
        return pair_saturating_acc(a, b, a_zp, b_zp)
    return matmul_acc(a, b, a_zp, b_zp)


def kernel_qlinear_matmul(a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp, y_type):
    """The kernel's QLinearMatMul: the host's accumulator, per-column float32 requantization."""
    acc = host_acc(a, b, a_zp, b_zp)
    scale = onnx_requant_scale(a_s, np.asarray(b_s, np.float32), y_s)
    return requant_float_concrete(acc, scale, y_zp, int_type(y_type)), acc


def _run_qlinear(rng, a_type, b_type, m, k, n, per_column: bool, y_type=None, aligned=False):
    """Random QLinearMatMul through ORT and the kernel; `aligned` rows make |acc| maximal."""
    y_type = y_type or a_type
    a = _rand(rng, a_type, (m, k))
    b = _rand(rng, b_type, (k, n))
    ai, bi, yi = np.iinfo(a_type), np.iinfo(b_type), np.iinfo(y_type)
    if aligned:  # row i follows the signs of column i: |acc| ~ K * 128 * 128
        for i in range(min(m, n)):
            hi, lo = (ai.max, ai.min) if i % 2 else (ai.min, ai.max)
            a[i] = np.where(b[:, i].astype(np.int64) >= (bi.max + bi.min + 1) // 2, hi, lo)
    a_s = np.float32(10 ** rng.uniform(-3, -1))
    a_zp = int(rng.integers(ai.min, ai.max + 1))
    if per_column:
        b_s = (10 ** rng.uniform(-3, -1, n)).astype(np.float32)
        b_zp = rng.integers(bi.min, bi.max + 1, n) if b_type == "uint8" else np.zeros(n, int)
    else:
        b_s = np.float32(10 ** rng.uniform(-3, -1))
        b_zp = int(rng.integers(bi.min, bi.max + 1)) if b_type == "uint8" else 0
    # y_scale / y_zero_point chosen so the outputs spread over the range instead of saturating.
    real = matmul_acc(a, b, a_zp, b_zp) * (float(a_s) * np.asarray(b_s, np.float64))
    spread = max(float(real.max() - real.min()), 1e-6)
    y_s = np.float32(spread / (yi.max - yi.min) * rng.uniform(0.5, 1.2))
    y_zp = int(np.clip(np.rint(yi.min - real.min() / y_s) + rng.integers(-20, 20), yi.min, yi.max))
    sess = M.qlinear_matmul(a_type, b, a_s, a_zp, b_s, b_zp, y_s, y_zp, y_type, m)
    got = sess.run(None, {"a": a})[0].astype(np.int64)
    ours, acc = kernel_qlinear_matmul(a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp, y_type)
    return got, ours, acc


@pytest.mark.parametrize("a_type,b_type", TYPE_PAIRS)
@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul(rng, a_type, b_type, per_column):
    total = 0
    for _ in range(6):
        k = int(rng.integers(1, 300))
        got, ours, _ = _run_qlinear(rng, a_type, b_type, 16, k, 24, per_column)
        bad = np.argwhere(got != ours)
        assert bad.size == 0, f"K={k}: {len(bad)} mismatches, first at {bad[:3].tolist()}"
        total += got.size
        assert len(np.unique(got)) > 10  # not a saturated, trivially equal output
    assert total >= 2000


def test_u8s8_data_reaches_pair_saturation(rng):
    """The random u8s8 operands these tests use make exact and pair-saturating sums differ."""
    a = _rand(rng, "uint8", (16, 64))
    b = _rand(rng, "int8", (64, 24))
    assert np.count_nonzero(saturation_excess(a, b)) > 16


def test_host_profile_matches_ort_on_saturating_u8s8(rng):
    """MatMulInteger u8s8 with every pair at its extreme: ORT equals the host profile's
    accumulator and differs from the other profile's (so the probe is not vacuous)."""
    b = np.array([[127, -128, 100], [127, -128, 100]] * 32, dtype=np.int8)
    a = np.full((5, 64), 255, dtype=np.uint8)
    a[1, ::3] = 0
    for a_zp in (0, 3):  # a_zp = 0 on one row is MLAS's GEMV path
        for m in (1, 5):
            got = M.matmul_integer("uint8", b, a_zp, 0, m).run(None, {"a": a[:m]})[0]
            exact = matmul_acc(a[:m], b, a_zp, 0)
            saturating = pair_saturating_acc(a[:m], b, a_zp, 0)
            assert not np.array_equal(exact, saturating)
            assert np.array_equal(got.astype(np.int64), host_acc(a[:m], b, a_zp, 0))


@pytest.mark.parametrize("a_type,b_type", [("uint8", "int8"), ("int8", "int8")])
def test_qlinear_matmul_accumulator_above_2_pow_24(rng, a_type, b_type):
    """K = 4096 with extreme operands: |acc| > 2^24, where int32 -> float32 rounds."""
    got, ours, acc = _run_qlinear(rng, a_type, b_type, 8, 4096, 16, True, aligned=True)
    assert np.abs(acc).max() > 1 << 24
    assert np.array_equal(got, ours)


def test_qlinear_matmul_requant_is_float32_not_real_arithmetic():
    """ORT: float32(acc) * float32(a_s*b_s/y_s), round half to even, then + zero point.

    acc = 128.5 * 2^17 + 1 rounds to 128.5 * 2^17 in float32; with scale 2^-17 ORT gets
    128.5 -> 128 (+zp -128 -> 0). The spec's formula in exact arithmetic (and
    onnx.reference, which multiplies in float64) gives 128.50001 -> 129 -> 1.
    """
    k = 1046
    a = np.array([[127] * 1044 + [127, 13]], dtype=np.int8)
    b = np.array([127] * 1044 + [32, 1], dtype=np.int8).reshape(k, 1)
    acc = int(matmul_acc(a, b)[0, 0])
    assert acc == int(128.5 * 2**17) + 1
    sess = M.qlinear_matmul("int8", b, 1.0, 0, 2.0**-17, 0, 1.0, -128, "int8", m=1)
    got = int(sess.run(None, {"a": a})[0][0, 0])
    ours, _ = kernel_qlinear_matmul(a, 1.0, 0, b, 2.0**-17, 0, 1.0, -128, "int8")
    assert got == int(ours[0, 0]) == 0
    ref = ReferenceEvaluator(onnx.load_from_string(sess.model_bytes)).run(None, {"a": a})[0]
    assert int(ref[0, 0]) == 1  # the ONNX reference implementation differs from ORT here


def test_qlinear_matmul_zero_point_added_after_rounding():
    """ORT rounds acc*s and then adds the zero point: round(2.5) + 1 = 3.

    onnx.reference adds the zero point before rounding: round(2.5 + 1) = 4.
    """
    a = np.array([[5]], dtype=np.uint8)
    b = np.array([[1]], dtype=np.uint8)
    sess = M.qlinear_matmul("uint8", b, 1.0, 0, 1.0, 0, 2.0, 1, "uint8", m=1)
    got = int(sess.run(None, {"a": a})[0][0, 0])
    ours, _ = kernel_qlinear_matmul(a, 1.0, 0, b, 1.0, 0, 2.0, 1, "uint8")
    assert got == int(ours[0, 0]) == 3
    ref = ReferenceEvaluator(onnx.load_from_string(sess.model_bytes)).run(None, {"a": a})[0]
    assert int(ref[0, 0]) == 4


def test_qlinear_matmul_large_k_many_outputs(rng):
    """8,192 outputs of K = 4096 int8 x int8 products, many with |acc| > 2^24: no mismatch."""
    for _ in range(4):
        got, ours, acc = _run_qlinear(rng, "int8", "int8", 32, 4096, 64, False, aligned=True)
        assert np.array_equal(got, ours)
        assert (np.abs(acc) > 1 << 24).sum() >= 32


@pytest.mark.parametrize("a_type,b_type", TYPE_PAIRS + [("int8", "uint8")])
def test_matmul_integer(rng, a_type, b_type):
    ai, bi = np.iinfo(a_type), np.iinfo(b_type)
    for k in (1, 7, 64, 1000):
        a = _rand(rng, a_type, (9, k))
        b = _rand(rng, b_type, (k, 11))
        a_zp = int(rng.integers(ai.min, ai.max + 1))
        for b_zp in (int(rng.integers(bi.min, bi.max + 1)), rng.integers(bi.min, bi.max + 1, 11)):
            got = M.matmul_integer(a_type, b, a_zp, b_zp, 9).run(None, {"a": a})[0]
            assert got.dtype == np.int32
            assert np.array_equal(host_acc(a, b, a_zp, b_zp), got.astype(np.int64))


def test_matmul_integer_per_row_a_zero_point_rejected_by_ort(rng):
    """The ONNX spec allows a 1-D a_zero_point of length M (per row); ORT 1.32's CPU kernel
    rejects it. The kernel's matmul_acc supports it; the compiler must not emit it for ORT."""
    a = _rand(rng, "uint8", (3, 4))
    b = _rand(rng, "uint8", (4, 2))
    a_zp = np.array([1, 2, 3], dtype=np.uint8)
    with pytest.raises(Exception, match="(?i)zero.?point|scalar"):
        M.matmul_integer("uint8", b, a_zp, 0, 3).run(None, {"a": a})
    want = (a.astype(np.int64) - a_zp[:, None]) @ b.astype(np.int64)
    assert np.array_equal(matmul_acc(a, b, a_zp, 0), want)


@pytest.mark.parametrize(
    "case",
    ["int8 a x uint8 b", "uint8 a -> int8 y", "per-row a scale"],
)
def test_qlinear_matmul_forms_the_spec_allows_but_ort_rejects(rng, case):
    """ONNX allows these QLinearMatMul forms; ORT 1.32's CPU provider has no kernel for them
    (NOT_IMPLEMENTED) or rejects the parameters, so a compiler must keep them off ORT paths."""
    a8 = rng.integers(-128, 128, (4, 16)).astype(np.int8)
    u8 = rng.integers(0, 256, (4, 16)).astype(np.uint8)
    b8 = rng.integers(-128, 128, (16, 5)).astype(np.int8)
    bu = rng.integers(0, 256, (16, 5)).astype(np.uint8)
    with pytest.raises(Exception, match="NOT_IMPLEMENTED|zero point|scale"):
        if case == "int8 a x uint8 b":
            sess = M.qlinear_matmul("int8", bu, 0.02, 3, 0.01, 128, 0.5, -3, "int8", 4)
            sess.run(None, {"a": a8})
        elif case == "uint8 a -> int8 y":
            sess = M.qlinear_matmul("uint8", b8, 0.02, 128, 0.01, 0, 0.5, -3, "int8", 4)
            sess.run(None, {"a": u8})
        else:
            a_s = np.full((4, 1), 0.02, np.float32)
            sess = M.qlinear_matmul("int8", b8, a_s, np.zeros((4, 1), np.int8), 0.01, 0,
                                    0.5, 0, "int8", 4)  # fmt: skip
            sess.run(None, {"a": a8})
