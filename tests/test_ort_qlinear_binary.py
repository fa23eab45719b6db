"""com.microsoft QLinearAdd / QLinearMul: `prover.qlinear_binary` equals ONNX Runtime bit for bit.

The emulation is of ORT's x86-64 kernels (AVX2+FMA QLinearAdd when the CPU has FMA, SSE2
QLinearMul); other hosts (ARM's fixed-point NEON QLinearAdd) are skipped, not guessed.
Every varying input covers all 256 values of its type; scales include near-ties (ratios a
few ulps off a short binary fraction), where the fused and unfused readings differ.
"""

from __future__ import annotations

import platform
import zlib

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from ort_models import session

from prover.domain import NumpyDomain, Z3Domain
from prover.inttypes import int_type
from prover.matmul import matmul_acc
from prover.mlas import host_uses_fma
from prover.qlinear_binary import (
    BinaryOp,
    QLinearBinaryParams,
    RequantThenBinary,
    SpanMode,
    qlinear_binary,
    qlinear_binary_table,
    span_mode,
)
from prover.requant import onnx_requant_scale

F32 = np.float32
ELEM = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}


def _host_fma() -> bool | None:
    """Whether ORT runs its FMA QLinearAdd kernel here; None on a non-x86-64 host."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    return host_uses_fma()  # AVX2 + FMA3 select the same MLAS kernels as for the logistic


HOST_FMA = _host_fma()
pytestmark = pytest.mark.skipif(
    HOST_FMA is None, reason="ORT's QLinearAdd kernel is emulated for x86-64 hosts only"
)


def _session(op: str, dtype: str, a_shape, b_shape, const_b=None) -> ort.InferenceSession:
    names = ["a", "as", "az", "b", "bs", "bz", "cs", "cz"]
    node = helper.make_node(op, names, ["c"], domain="com.microsoft")
    t = ELEM[dtype]
    shapes = {"a": list(a_shape), "b": list(b_shape)}
    inits = []
    if const_b is not None:  # a constant operand, as a quantized bias is
        inits.append(helper.make_tensor("b", t, list(b_shape), np.asarray(const_b).ravel()))
    inputs = [
        helper.make_tensor_value_info(
            n, TensorProto.FLOAT if n.endswith("s") else t, shapes.get(n, [])
        )
        for n in names
        if not (n == "b" and const_b is not None)
    ]
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("c", t, None)], inits)
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    )
    m.ir_version = 10
    return session(m.SerializeToString())


def _run(op, a, b, p: QLinearBinaryParams, const_b: bool = False) -> np.ndarray:
    s = _session(op, p.dtype, a.shape, b.shape, const_b=b if const_b else None)
    dt = p.dtype
    feed = {
        "a": a.astype(dt),
        "as": np.array(p.a_scale, F32),
        "az": np.array(p.a_zp, dt),
        "bs": np.array(p.b_scale, F32),
        "bz": np.array(p.b_zp, dt),
        "cs": np.array(p.c_scale, F32),
        "cz": np.array(p.c_zp, dt),
    }
    if not const_b:
        feed["b"] = b.astype(dt)
    return s.run(None, feed)[0].astype(np.int64)


def _scale(rng) -> F32:
    if rng.random() < 0.5:
        return F32(10 ** rng.uniform(-3, 0))
    # a short binary fraction a few ulps off: ratios land next to rounding ties
    base = 2.0 ** int(rng.integers(-10, 0)) * int(rng.integers(1, 64))
    return F32(base * (1 + int(rng.integers(-8, 8)) * 2.0**-23))


def _params(rng, dtype: str) -> QLinearBinaryParams:
    i = np.iinfo(dtype)
    zp = [int(rng.integers(i.min, i.max + 1)) for _ in range(3)]
    return QLinearBinaryParams(
        a_scale=_scale(rng), a_zp=zp[0], b_scale=_scale(rng), b_zp=zp[1],
        c_scale=_scale(rng), c_zp=zp[2], dtype=dtype,
    )  # fmt: skip


def _all_values(dtype: str, n: int) -> np.ndarray:
    """[256, n]: every value of the type in every column."""
    i = np.iinfo(dtype)
    return np.tile(np.arange(i.min, i.max + 1, dtype=np.int64)[:, None], (1, n))


# (A shape, B shape, span mode) with A = all values [256, 16]; B random of its shape.
LAYOUTS = [
    ((256, 16), (16,), SpanMode.GENERAL),  # a bias row broadcast over rows
    ((256, 16), (1, 16), SpanMode.GENERAL),
    ((256, 16), (256, 16), SpanMode.GENERAL),
    ((256, 16), (256, 1), SpanMode.B_SCALAR),
    ((256, 16), (1,), SpanMode.B_SCALAR),
    ((1,), (256, 16), SpanMode.A_SCALAR),
    ((256, 1), (256, 16), SpanMode.A_SCALAR),
]


@pytest.mark.parametrize("op", [BinaryOp.ADD, BinaryOp.MUL])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("a_shape,b_shape,mode", LAYOUTS)
def test_matches_ort(op, dtype, a_shape, b_shape, mode):
    assert span_mode(a_shape, b_shape) is mode
    rng = np.random.default_rng(zlib.crc32(repr((str(op), dtype, a_shape, b_shape)).encode()))
    i = np.iinfo(dtype)
    mismatches = total = 0
    for _ in range(12):
        p = _params(rng, dtype)
        if a_shape == (256, 16):
            a, b = _all_values(dtype, 16), rng.integers(i.min, i.max + 1, b_shape)
        else:
            a, b = rng.integers(i.min, i.max + 1, a_shape), _all_values(dtype, 16)
        got = _run(op, a, b, p)
        want = qlinear_binary(op, a, b, p, fma=HOST_FMA)
        assert got.shape == want.shape
        mismatches += int((got != want).sum())
        total += got.size
    assert mismatches == 0, f"{mismatches} of {total} outputs differ from ORT"


def _tie_params(rng, dtype: str, op: BinaryOp, layout, limit: int = 20000):
    """A parameter set (and inputs) where the fused and unfused QLinearAdd readings differ."""
    i = np.iinfo(dtype)
    a_shape, b_shape, _ = layout
    for _ in range(limit):
        p = _params(rng, dtype)
        a = _all_values(dtype, 16)
        b = rng.integers(i.min, i.max + 1, b_shape)
        if (qlinear_binary(op, a, b, p, fma=True) != qlinear_binary(op, a, b, p, fma=False)).any():
            return p, a, b
    raise AssertionError("no distinguishing parameters found")


@pytest.mark.parametrize("layout", [LAYOUTS[0], LAYOUTS[4]], ids=["bias_row", "scalar"])
def test_add_fused_reading_is_the_one_ort_runs(layout):
    """Negative control: on near-tie scales the unfused float reading is wrong on this host."""
    rng = np.random.default_rng(7)
    p, a, b = _tie_params(rng, "uint8", BinaryOp.ADD, layout)
    got = _run(BinaryOp.ADD, a, b, p)
    right = qlinear_binary(BinaryOp.ADD, a, b, p, fma=HOST_FMA)
    wrong = qlinear_binary(BinaryOp.ADD, a, b, p, fma=not HOST_FMA)
    assert (got == right).all()
    assert (got != wrong).any()


def test_add_operand_order_matters():
    """Swapping A and B (same values, scales and zero points) changes ORT's result somewhere."""
    rng = np.random.default_rng(3)
    for _ in range(2000):
        p = _params(rng, "uint8")
        a = _all_values("uint8", 16)
        b = rng.integers(0, 256, (16,))
        swapped = QLinearBinaryParams(
            a_scale=p.b_scale, a_zp=p.b_zp, b_scale=p.a_scale, b_zp=p.a_zp,
            c_scale=p.c_scale, c_zp=p.c_zp, dtype="uint8",
        )  # fmt: skip
        x = qlinear_binary(BinaryOp.ADD, a, b, p, fma=HOST_FMA)
        y = qlinear_binary(BinaryOp.ADD, b[None, :], a, swapped, fma=HOST_FMA)
        if (x != y).any():
            assert (_run(BinaryOp.ADD, a, b, p) == x).all()
            assert (_run(BinaryOp.ADD, b[None, :], a, swapped) == y).all()
            return
    pytest.fail("operand order never mattered")


def test_constant_operand_initializer():
    """A constant (initializer) B runs the same kernel as a fed one."""
    rng = np.random.default_rng(11)
    for dtype in ("uint8", "int8"):
        i = np.iinfo(dtype)
        p = _params(rng, dtype)
        a, b = _all_values(dtype, 16), rng.integers(i.min, i.max + 1, (16,))
        for op in BinaryOp:
            got = _run(op, a, b, p, const_b=True)
            assert (got == qlinear_binary(op, a, b, p, fma=HOST_FMA)).all()


# --- the obligation forms --------------------------------------------------------------


def _qmatmul_then_binary(op, x, w, x_s, x_zp, w_s, y_s, y_zp, bias_q, p, dtype):
    """ORT: QLinearMatMul(x, w) -> op(., bias_q) with p's A = the matmul output."""
    t = ELEM[dtype]
    k, n = w.shape
    mm = helper.make_node("QLinearMatMul", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])
    bn = helper.make_node(
        str(op), ["y", "ys", "yz", "c", "cs", "cz", "os", "oz"], ["o"], domain="com.microsoft"
    )

    def init(name, v, ty):
        arr = np.asarray(v)
        return helper.make_tensor(name, ty, list(arr.shape), arr.ravel().tolist())

    inits = [
        init("xs", F32(x_s), TensorProto.FLOAT), init("xz", x_zp, t), init("w", w, t),
        init("ws", F32(w_s), TensorProto.FLOAT), init("wz", 0 if dtype == "int8" else 128, t),
        init("ys", F32(y_s), TensorProto.FLOAT), init("yz", y_zp, t), init("c", bias_q, t),
        init("cs", F32(p.b_scale), TensorProto.FLOAT), init("cz", p.b_zp, t),
        init("os", F32(p.c_scale), TensorProto.FLOAT), init("oz", p.c_zp, t),
    ]  # fmt: skip
    g = helper.make_graph(
        [mm, bn], "g", [helper.make_tensor_value_info("x", t, list(x.shape))],
        [helper.make_tensor_value_info("o", t, None)], inits,
    )  # fmt: skip
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    )
    m.ir_version = 10
    return session(m.SerializeToString()).run(None, {"x": x.astype(dtype)})[0].astype(np.int64)


@pytest.mark.parametrize("op", [BinaryOp.ADD, BinaryOp.MUL])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_requant_then_binary_chain_matches_ort(op, dtype):
    """QLinearMatMul -> QLinearAdd/Mul(bias) in ORT equals RequantThenBinary of the exact acc.

    Same-type matmuls (u8u8, s8s8) accumulate exactly on every x86 CPU.
    """
    rng = np.random.default_rng(5 + (op is BinaryOp.MUL) + 2 * (dtype == "int8"))
    i = np.iinfo(dtype)
    k, n, m = 24, 8, 512
    wz = 0 if dtype == "int8" else 128
    for _ in range(4):
        x = rng.integers(i.min, i.max + 1, (m, k))
        w = rng.integers(i.min, i.max + 1, (k, n))
        x_s, w_s = F32(10 ** rng.uniform(-3, -1)), F32(10 ** rng.uniform(-3, -1))
        x_zp = int(rng.integers(i.min, i.max + 1))
        acc = matmul_acc(x, w, x_zp, wz)
        real = acc * (float(x_s) * float(w_s))
        y_s = F32((real.max() - real.min()) / 255 * rng.uniform(0.6, 1.1))
        y_zp = int(np.clip(np.rint(i.min - real.min() / y_s), i.min, i.max))
        bias_q = rng.integers(i.min, i.max + 1, (n,))
        q = _params(rng, dtype)
        p = QLinearBinaryParams(
            a_scale=y_s, a_zp=y_zp, b_scale=q.b_scale, b_zp=q.b_zp,
            c_scale=q.c_scale, c_zp=q.c_zp, dtype=dtype,
        )  # fmt: skip
        got = _qmatmul_then_binary(op, x, w, x_s, x_zp, w_s, y_s, y_zp, bias_q, p, dtype)
        rs = onnx_requant_scale(x_s, w_s, y_s)
        for j in range(n):
            f = RequantThenBinary(
                op=op, requant_scale=float(rs), const=int(bias_q[j]), params=p,
                x_is_a=True, mode=SpanMode.GENERAL, fma=HOST_FMA,
            )  # fmt: skip
            assert (f.concrete(acc[:, j]) == got[:, j]).all()
            assert (f.steps(NumpyDomain(), acc[:, j]) == got[:, j]).all()


@pytest.mark.parametrize("op", [BinaryOp.ADD, BinaryOp.MUL])
def test_staircase_equals_direct_evaluation(op):
    """The comparison-only form equals the float evaluation at every threshold and neighbour."""
    rng = np.random.default_rng(21)
    for dtype in ("uint8", "int8"):
        i = np.iinfo(dtype)
        for const in (i.min, i.max, int(rng.integers(i.min, i.max + 1))):
            p = _params(rng, dtype)
            f = RequantThenBinary(
                op=op, requant_scale=float(F32(10 ** rng.uniform(-4, -2))), const=const,
                params=p, x_is_a=bool(rng.integers(2)), mode=SpanMode.GENERAL, fma=True,
            )  # fmt: skip
            t = np.array([v for v in f.thresholds() if v <= 2**31 - 1], dtype=np.int64)
            pts = np.unique(np.concatenate([t - 1, t, t + 1, rng.integers(-(2**31), 2**31, 2000)]))
            pts = pts[(pts >= -(2**31)) & (pts < 2**31)]
            n = NumpyDomain().step_count(pts, f.thresholds())
            inc = f.increasing()
            out = int_type(dtype)
            stair = (out.min + n) if inc else (out.max - n)
            assert (stair == f.concrete(pts)).all()


def test_staircase_z3_form():
    """The symbolic form (Z3) agrees with the concrete one at sampled points."""
    import z3

    rng = np.random.default_rng(4)
    p = _params(rng, "uint8")
    f = RequantThenBinary(
        op=BinaryOp.ADD, requant_scale=0.003, const=77, params=p, x_is_a=True,
        mode=SpanMode.GENERAL,
    )  # fmt: skip
    d = Z3Domain()
    acc = z3.BitVec("acc", 64)
    term = f.steps(d, acc)
    for v in (-70000, -1, 0, 1, 5000, 123456):
        val = z3.simplify(z3.substitute(term, (acc, z3.BitVecVal(v, 64)))).as_signed_long()
        assert val == int(f.concrete(np.array([v]))[0])


def test_table_form_matches_broadcast_kernel():
    rng = np.random.default_rng(9)
    p = _params(rng, "int8")
    for mode, x_is_a in (
        (SpanMode.GENERAL, True),
        (SpanMode.GENERAL, False),
        (SpanMode.B_SCALAR, True),
    ):
        t = qlinear_binary_table(BinaryOp.ADD, -5, p, x_is_a=x_is_a, mode=mode)
        xs = np.arange(-128, 128)
        if mode is SpanMode.B_SCALAR:
            want = qlinear_binary(BinaryOp.ADD, xs, np.array([-5]), p)
        elif x_is_a:
            want = qlinear_binary(BinaryOp.ADD, xs[:, None], np.full((256, 1), -5), p)[:, 0]
        else:
            want = qlinear_binary(BinaryOp.ADD, np.full((256, 1), -5), xs[:, None], p)[:, 0]
        assert tuple(int(v) for v in want.ravel()) == t


def test_bad_parameters_are_kernel_errors():
    from prover.domain import KernelError

    with pytest.raises(KernelError):
        QLinearBinaryParams(
            a_scale=0.0, a_zp=0, b_scale=1, b_zp=0, c_scale=1, c_zp=0, dtype="uint8"
        )
    with pytest.raises(KernelError):
        QLinearBinaryParams(
            a_scale=1, a_zp=300, b_scale=1, b_zp=0, c_scale=1, c_zp=0, dtype="uint8"
        )
    with pytest.raises(KernelError):
        QLinearBinaryParams(a_scale=1, a_zp=0, b_scale=1, b_zp=0, c_scale=1, c_zp=0, dtype="int16")
    p = QLinearBinaryParams(a_scale=1, a_zp=0, b_scale=1, b_zp=0, c_scale=1, c_zp=0, dtype="int8")
    with pytest.raises(KernelError):
        qlinear_binary(BinaryOp.ADD, np.array([200]), np.array([1]), p)


@pytest.mark.parametrize(
    "a_shape,b_shape,mode",
    [
        ((256, 16), (16,), SpanMode.GENERAL),
        ((256, 1), (256, 16), SpanMode.A_SCALAR),
        ((2, 1, 16), (2, 256, 1), SpanMode.B_SCALAR),
    ],
)
def test_span_operand_is_the_one_ort_picks(a_shape, b_shape, mode):
    """Which operand is the kernel's span `p` matters; ORT's choice is `span_mode`'s.

    (With FMA the span-span and span-scalar formulas coincide; the roles do not.)
    """
    from prover.qlinear_binary import qladd_kernel

    rng = np.random.default_rng(17)
    assert span_mode(a_shape, b_shape) is mode
    for _ in range(20000):
        p = _params(rng, "uint8")
        a = rng.integers(0, 256, a_shape)
        b = rng.integers(0, 256, b_shape)
        ab, bb = np.broadcast_arrays(a, b)
        scales = (p.a_scale, p.a_zp, p.b_scale, p.b_zp)
        swapped = (p.b_scale, p.b_zp, p.a_scale, p.a_zp)
        if mode is SpanMode.A_SCALAR:  # the wrong reading: A as the span
            alt = qladd_kernel(
                ab, bb, *scales, p.c_scale, p.c_zp, p.out, q_scalar=True, fma=HOST_FMA
            )
        else:  # the wrong reading: B as the span
            alt = qladd_kernel(
                bb, ab, *swapped, p.c_scale, p.c_zp, p.out,
                q_scalar=mode is SpanMode.GENERAL, fma=HOST_FMA,
            )  # fmt: skip
        want = qlinear_binary(BinaryOp.ADD, a, b, p, fma=HOST_FMA)
        if (alt != want).any():
            got = _run(BinaryOp.ADD, a, b, p)
            assert (got == want).all()
            assert (got != alt).any()
            return
    pytest.fail("no parameters distinguish the two operand roles")
