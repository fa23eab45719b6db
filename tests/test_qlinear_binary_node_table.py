"""A `qlinear_binary` node's per-column table (`compiler.ir.semantics.qlinear_binary_column_table`,
the one both the IR's meaning and the fused epilogue's `before` side use) against ONNX Runtime.

Random QLinearAdd / QLinearMul nodes with one constant operand (per column or one scalar, on
either side) are read by the frontend under this host's reference profile (`ort-host`, so the
FMA choice is the host's), and every column's table is compared with ORT over all 256 values.
"""

from __future__ import annotations

import platform

import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as oh

from compiler.frontend.reader import to_ir
from compiler.ir.graph import Node
from compiler.ir.semantics import qlinear_binary_column_table
from compiler.ort.reference_host import resolve_reference
from compiler.ort.tables import session

pytestmark = pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64"),
    reason="ORT's QLinearAdd kernel is emulated for x86-64 hosts only",
)

ELEM = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}
N = 6  # output columns


@pytest.fixture(scope="module")
def host_profile():
    return resolve_reference("ort-host")


def _scale(rng: np.random.Generator) -> float:
    """A random scale, or (half the time) a short binary fraction a few ulps off, where
    sums land next to rounding ties and the FMA and non-FMA kernels differ."""
    if rng.random() < 0.5:
        return float(np.float32(10 ** rng.uniform(-3, 0)))
    base = 2.0 ** int(rng.integers(-10, 0)) * int(rng.integers(1, 64))
    return float(np.float32(base * (1 + int(rng.integers(-8, 8)) * 2.0**-23)))


def _model(rng: np.random.Generator, op: str, dtype: str, x_is_a: bool, scalar: bool):
    """A one-node model `y = op(x, c)` (or `op(c, x)`) with `c` constant; x is [256, N]."""
    i = np.iinfo(dtype)
    t = ELEM[dtype]
    c_shape = [1] if scalar else [N]
    c = rng.integers(i.min, i.max + 1, size=c_shape).astype(dtype)
    inits = [oh.make_tensor("c", t, c_shape, c.ravel().tolist())]
    for name in ("as", "bs", "cs"):
        inits.append(oh.make_tensor(name, TensorProto.FLOAT, [], [_scale(rng)]))
    for name in ("az", "bz", "cz"):
        inits.append(oh.make_tensor(name, t, [], [int(rng.integers(i.min, i.max + 1))]))
    a, b = ("x", "c") if x_is_a else ("c", "x")
    node = oh.make_node(
        op, [a, "as", "az", b, "bs", "bz", "cs", "cz"], ["y"], name="bin", domain="com.microsoft"
    )
    g = oh.make_graph(
        [node],
        "g",
        [oh.make_tensor_value_info("x", t, [256, N])],
        [oh.make_tensor_value_info("y", t, [256, N])],
        inits,
    )
    m = oh.make_model(
        g, opset_imports=[oh.make_opsetid("", 21), oh.make_opsetid("com.microsoft", 1)]
    )
    m.ir_version = 10
    return m


CASES = [
    (op, dtype, x_is_a, scalar)
    for op in ("QLinearAdd", "QLinearMul")
    for dtype in ("uint8", "int8")
    for x_is_a, scalar in ((True, False), (False, False), (True, True), (False, True))
]


@pytest.mark.parametrize("op,dtype,x_is_a,scalar", CASES)
def test_column_table_equals_ort(op, dtype, x_is_a, scalar, rng, host_profile):
    """Each column's table is ORT's output for that column over every input value."""
    for _ in range(2):
        m = _model(rng, op, dtype, x_is_a, scalar)
        g, _ = to_ir(m, reference=host_profile)
        node = next(n for n in g.nodes if n.op == "qlinear_binary")
        i = np.iinfo(dtype)
        xs = np.tile(np.arange(i.min, i.max + 1, dtype=dtype)[:, None], (1, N))
        want = session(m).run(None, {"x": xs})[0].astype(np.int64)
        for j in range(N):
            got = np.asarray(qlinear_binary_column_table(node, j), dtype=np.int64)
            assert np.array_equal(got, want[:, j]), (op, dtype, x_is_a, scalar, j)


def test_table_follows_the_node_fma_flag(rng, host_profile):
    """Negative control: on a near-tie QLinearAdd the table with the other FMA choice
    differs from ORT (so a reader that ignored or defaulted the node's flag is caught)."""
    for _ in range(300):
        m = _model(rng, "QLinearAdd", "uint8", True, False)
        g, _ = to_ir(m, reference=host_profile)
        node = next(n for n in g.nodes if n.op == "qlinear_binary")
        right = [qlinear_binary_column_table(node, j) for j in range(N)]
        node.attrs["fma"] = not node.attrs["fma"]
        wrong = [qlinear_binary_column_table(node, j) for j in range(N)]
        if right != wrong:
            break
    else:
        raise AssertionError("no near-tie model found")
    xs = np.tile(np.arange(256, dtype=np.uint8)[:, None], (1, N))
    want = session(m).run(None, {"x": xs})[0].astype(np.int64)
    assert all(list(want[:, j]) == list(right[j]) for j in range(N))
    assert any(list(want[:, j]) != list(wrong[j]) for j in range(N))


def test_no_default_for_a_missing_fma_or_column():
    """A node without its `fma` flag or with fewer constants than columns is an error,
    never a silently assumed kernel or a broadcast constant."""
    params = dict(a_scale=0.02, a_zp=3, b_scale=0.05, b_zp=-4, c_scale=0.03, c_zp=1, dtype="int8")
    attrs = dict(
        binary="QLinearAdd", const=(5,), x_is_a=True, mode="general", params=params, fma=True
    )
    ok = Node("bin", "qlinear_binary", ["x"], ["y"], dict(attrs))
    assert len(qlinear_binary_column_table(ok, 0)) == 256
    with pytest.raises(IndexError):
        qlinear_binary_column_table(ok, 1)
    no_fma = {k: v for k, v in attrs.items() if k != "fma"}
    with pytest.raises(KeyError):
        qlinear_binary_column_table(Node("bin", "qlinear_binary", ["x"], ["y"], no_fma), 0)
