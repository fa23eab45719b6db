"""com.microsoft QGemm: `prover.qgemm` equals ONNX Runtime bit for bit.

The uint8 x int8 accumulation depends on the CPU (exact with VNNI, pair-saturating on AVX2
without it): the host's behaviour is probed once and the matching reference profile used.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from ort_models import session

from prover.domain import KernelError, NumpyDomain
from prover.matmul import matmul_acc
from prover.qgemm import QGemmParams, output_scales, qgemm, qgemm_acc, qgemm_epilogue
from prover.requant import onnx_requant_scale

F32 = np.float32
ELEM = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8, "int32": TensorProto.INT32}


def _model(nodes, inputs, outputs, inits) -> bytes:
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    )
    m.ir_version = 10
    return m.SerializeToString()


def _t(name, arr, ty):
    arr = np.asarray(arr)
    return helper.make_tensor(name, ty, list(arr.shape), arr.ravel().tolist())


def _host_profile() -> str:
    """`onnx` if ORT sums uint8 x int8 products exactly here, else `ort-x86-avx2`."""
    node = helper.make_node("MatMulInteger", ["a", "w"], ["y"])
    w = np.full((2, 1), 127, np.int8)
    m = _model(
        [node],
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [_t("w", w, TensorProto.INT8)],
    )
    s = session(m)
    y = int(s.run(None, {"a": np.full((1, 2), 255, np.uint8)})[0][0, 0])
    return "onnx" if y == 2 * 255 * 127 else "ort-x86-avx2"


HOST = _host_profile()


def _run_ort(a, b, p: QGemmParams, c=None, b_const=True) -> np.ndarray:
    """ORT's QGemm on A (fed) and B (an initializer, so ORT prepacks it, or fed)."""
    ins = ["a", "as", "az", "b", "bs", "bz", "c" if c is not None else ""]
    if p.quantized_output:
        ins += ["ys", "yz"]
    attrs = {"alpha": float(p.alpha), "transA": int(p.trans_a), "transB": int(p.trans_b)}
    node = helper.make_node("QGemm", ins, ["y"], domain="com.microsoft", **attrs)
    bs = np.asarray(p.b_scale, F32)
    bz = np.asarray(p.b_zp)
    if bs.size == 1:
        bs, bz = bs.reshape(()), bz.reshape(())
    inits = [
        _t("as", F32(p.a_scale), TensorProto.FLOAT),
        _t("az", p.a_zp, ELEM[p.a_type]),
        _t("bs", bs, TensorProto.FLOAT),
        _t("bz", bz, ELEM[p.b_type]),
    ]
    inputs = [helper.make_tensor_value_info("a", ELEM[p.a_type], list(np.shape(a)))]
    if b_const:
        inits.append(_t("b", b, ELEM[p.b_type]))
    else:
        inputs.append(helper.make_tensor_value_info("b", ELEM[p.b_type], list(np.shape(b))))
    if c is not None:
        inits.append(_t("c", np.asarray(c, np.int32), TensorProto.INT32))
    if p.quantized_output:
        inits += [_t("ys", F32(p.y_scale), TensorProto.FLOAT), _t("yz", p.y_zp, ELEM[p.a_type])]
        out_t = ELEM[p.a_type]
    else:
        out_t = TensorProto.FLOAT
    m = _model([node], inputs, [helper.make_tensor_value_info("y", out_t, None)], inits)
    s = session(m)
    feed = {"a": np.asarray(a).astype(p.a_type)}
    if not b_const:
        feed["b"] = np.asarray(b).astype(p.b_type)
    y = s.run(None, feed)[0]
    return y if not p.quantized_output else y.astype(np.int64)


def _rand(rng, dtype, shape):
    i = np.iinfo(dtype)
    x = rng.integers(i.min, i.max + 1, shape)
    ext = rng.random(shape) < 0.2  # extremes make |acc| large (and pairs saturate on AVX2)
    x[ext] = rng.choice([i.min, i.max], size=int(ext.sum()))
    return x


def _case(rng, a_type, b_type, *, per_column, quantized, trans_a, trans_b, bias, alpha):
    m, k, n = int(rng.integers(1, 40)), int(rng.integers(1, 70)), int(rng.integers(1, 24))
    a = _rand(rng, a_type, (m, k))
    b = _rand(rng, b_type, (k, n))
    ai = np.iinfo(a_type)
    a_zp = int(rng.integers(ai.min, ai.max + 1))
    cnt = n if per_column else 1
    b_s = tuple(float(F32(10 ** rng.uniform(-3, -1))) for _ in range(cnt))
    if b_type == "uint8":
        b_zp = tuple(int(rng.integers(0, 256)) for _ in range(cnt))
    else:
        b_zp = tuple(int(rng.integers(-3, 4)) for _ in range(cnt))
    a_s = float(F32(10 ** rng.uniform(-3, -1)))
    c = rng.integers(-(2**15), 2**15, (n,)) if bias == "row" else None
    if bias == "full":
        c = rng.integers(-(2**15), 2**15, (m, n))
    if bias == "col":
        c = rng.integers(-(2**15), 2**15, (m, 1))
    if bias == "scalar":
        c = np.array(int(rng.integers(-(2**15), 2**15)))
    y_s = y_zp = None
    if quantized:
        acc = matmul_acc(a, b, a_zp, np.asarray(b_zp) if per_column else b_zp[0])
        if c is not None:
            acc = acc + c
        real = acc * (alpha * a_s * np.asarray(b_s))
        y_s = float(F32(max(float(real.max() - real.min()), 1e-6) / 255 * rng.uniform(0.5, 1.2)))
        y_zp = int(np.clip(np.rint(ai.min - real.min() / y_s), ai.min, ai.max))
    p = QGemmParams(
        a_type=a_type, b_type=b_type, a_scale=a_s, a_zp=a_zp, b_scale=b_s, b_zp=b_zp,
        y_scale=y_s, y_zp=y_zp, alpha=alpha, trans_a=trans_a, trans_b=trans_b,
    )  # fmt: skip
    if trans_a:
        a = a.T.copy()
    if trans_b:
        b = b.T.copy()
    return a, b, c, p


TYPES = [("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8")]


@pytest.mark.parametrize("a_type,b_type", TYPES)
@pytest.mark.parametrize("quantized", [True, False], ids=["y_scale", "float_out"])
@pytest.mark.parametrize("per_column", [False, True], ids=["per_tensor", "per_column"])
def test_matches_ort(a_type, b_type, quantized, per_column):
    rng = np.random.default_rng([TYPES.index((a_type, b_type)), int(quantized), int(per_column)])
    mismatches = total = 0
    for i in range(20):
        a, b, c, p = _case(
            rng, a_type, b_type, per_column=per_column, quantized=quantized,
            trans_a=bool(i & 1), trans_b=bool(i & 2),
            bias=("row", None, "full", "col", "scalar")[i % 5],
            alpha=(1.0, 0.5, 1.7, 0.3)[i % 4],
        )  # fmt: skip
        got = _run_ort(a, b, p, c, b_const=bool(i % 3))
        want = qgemm(a, b, p, c, profile=HOST)
        assert got.shape == want.shape
        if quantized:
            mismatches += int((got != want).sum())
        else:
            assert got.dtype == np.float32
            mismatches += int((got.view(np.int32) != want.view(np.int32)).sum())
        total += got.size
    assert mismatches == 0, f"{mismatches} of {total} differ ({HOST} profile)"


def test_alpha_is_folded_into_the_scale_first():
    """ORT's scale is ((alpha * a_s) * b_s) / y_s, not alpha * ((a_s * b_s) / y_s).

    Searches scales and an accumulator K (a row of K ones times a column of ones) where the
    two orders round differently; ORT must agree with the first and not the second.
    """
    rng = np.random.default_rng(1)
    ks = np.arange(1, 4097, dtype=np.int64)
    for _ in range(20000):
        a_s, b_s = (float(F32(10 ** rng.uniform(-2, 0))) for _ in range(2))
        alpha = float(F32(rng.uniform(0.2, 3.0)))
        y_s = float(F32(a_s * b_s * alpha * 4096 / 255 * rng.uniform(0.5, 1.0)))
        p = QGemmParams(
            a_type="uint8", b_type="uint8", a_scale=a_s, a_zp=0, b_scale=(b_s,), b_zp=(0,),
            y_scale=y_s, y_zp=0, alpha=alpha,
        )  # fmt: skip
        other = F32(F32(alpha) * onnx_requant_scale(a_s, b_s, y_s))
        if output_scales(p)[0] == other:
            continue
        y_ort = np.minimum(np.rint(ks.astype(F32) * output_scales(p)[0]), 255)
        y_other = np.minimum(np.rint(ks.astype(F32) * other), 255)
        hit = ks[y_ort != y_other]
        if hit.size:
            break
    else:
        pytest.fail("no scale set distinguishes the two orders")
    k = int(hit[0])
    got = _run_ort(np.ones((1, k), np.int64), np.ones((k, 1), np.int64), p)
    assert int(got[0, 0]) == int(y_ort[k - 1]) != int(y_other[k - 1])


def test_u8s8_profiles_differ_where_pairs_saturate():
    """The exact and pair-saturating profiles disagree on a saturating row; the host's wins."""
    a = np.full((1, 4), 255, np.int64)
    b = np.full((4, 1), 127, np.int64)
    p = QGemmParams(a_type="uint8", b_type="int8", a_scale=0.01, a_zp=0, b_scale=(0.01,), b_zp=(0,))
    exact = qgemm_acc(a, b, p, profile="onnx")
    sat = qgemm_acc(a, b, p, profile="ort-x86-avx2")
    assert int(exact[0, 0]) == 4 * 255 * 127
    assert int(sat[0, 0]) == 2 * 32767
    got = _run_ort(a, b, p)
    assert (got.view(np.int32) == qgemm(a, b, p, profile=HOST).view(np.int32)).all()


def test_epilogue_staircase_equals_requant():
    rng = np.random.default_rng(2)
    a, b, c, p = _case(
        rng, "uint8", "int8", per_column=True, quantized=True, trans_a=False, trans_b=False,
        bias="row", alpha=1.0,
    )  # fmt: skip
    acc = qgemm_acc(a, b, p, c, profile=HOST)
    y = qgemm(a, b, p, c, profile=HOST)
    from prover.requant import requant_float_steps

    for j in range(acc.shape[1]):
        col = acc[:, j]
        assert (qgemm_epilogue(NumpyDomain(), col, p, j) == y[:, j]).all()
        s = float(output_scales(p)[j])
        assert (requant_float_steps(NumpyDomain(), col, s, p.y_zp, p.out) == y[:, j]).all()


@pytest.mark.parametrize(
    "kwargs,msg",
    [
        (dict(a_scale=0.0), "a_scale"),
        (dict(b_zp=(300,)), "b_zero_point"),
        (dict(a_type="int8"), "int8 A"),
        (dict(y_scale=0.1), "together"),
        (dict(b_scale=(0.1, 0.2)), "same length"),
        (dict(y_scale=0.1, y_zp=0, alpha=-1.0), "alpha"),
    ],
)
def test_bad_parameters(kwargs, msg):
    base = dict(a_type="uint8", b_type="uint8", a_scale=0.1, a_zp=0, b_scale=(0.1,), b_zp=(0,))
    base.update(kwargs)
    with pytest.raises(KernelError, match=msg):
        QGemmParams(**base)


def test_bad_shapes():
    p = QGemmParams(a_type="uint8", b_type="uint8", a_scale=0.1, a_zp=0, b_scale=(0.1,), b_zp=(0,))
    with pytest.raises(KernelError, match="inner"):
        qgemm(np.zeros((2, 3)), np.zeros((4, 2)), p)
    with pytest.raises(KernelError, match="bias shape"):
        qgemm(np.zeros((2, 3)), np.zeros((3, 2)), p, c=np.zeros((3,)))
    with pytest.raises(KernelError, match="outside"):
        qgemm(np.full((2, 3), 256), np.zeros((3, 2)), p)
