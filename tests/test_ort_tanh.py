"""MLAS tanh emulation vs ONNX Runtime's float Tanh, and the QDQ Tanh table it implies."""

from __future__ import annotations

import numpy as np
import ort_models as M
import pytest
from onnx import TensorProto, helper

from prover.lut import LutSpec, build_lut
from prover.mlas import host_uses_fma, mlas_tanh

FUSED = host_uses_fma()
pytestmark = pytest.mark.skipif(not FUSED, reason="tanh emulation verified for the FMA kernel only")


def _model(nodes, x_type, y_type, inits=()):
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", M.ELEM[x_type], [None])],
        [helper.make_tensor_value_info("y", M.ELEM[y_type], [None])],
        list(inits),
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", M.OPSET)])
    m.ir_version = 10
    return M.session(m.SerializeToString())


def test_mlas_tanh_equals_ort_float_tanh(rng):
    x = np.concatenate(
        [
            rng.uniform(-10, 10, 200_000),
            rng.standard_normal(200_000),
            [0.0, -0.0, 9.0, -9.0, 9.5, -1e30, 1e-30, 1e30],
        ]
    ).astype(np.float32)
    want = _model([helper.make_node("Tanh", ["x"], ["y"])], "float32", "float32").run(
        None, {"x": x}
    )[0]
    got = mlas_tanh(x)
    assert np.array_equal(got.view(np.int32), want.view(np.int32))
    assert not np.array_equal(np.tanh(x).view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_qdq_tanh_table(rng, dtype):
    info = np.iinfo(dtype)
    x = np.arange(info.min, info.max + 1).astype(dtype)
    et = M.ELEM[dtype]
    for _ in range(40):
        xs = float(np.float32(10 ** rng.uniform(-3, -0.5)))
        ys = float(np.float32(10 ** rng.uniform(-3, -1.8)))
        xz, yz = (int(v) for v in rng.integers(info.min, info.max + 1, 2))
        nodes = [
            helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["f"]),
            helper.make_node("Tanh", ["f"], ["g"]),
            helper.make_node("QuantizeLinear", ["g", "ys", "yz"], ["y"]),
        ]
        inits = [
            helper.make_tensor("xs", TensorProto.FLOAT, [], [xs]),
            helper.make_tensor("xz", et, [], [xz]),
            helper.make_tensor("ys", TensorProto.FLOAT, [], [ys]),
            helper.make_tensor("yz", et, [], [yz]),
        ]
        want = _model(nodes, dtype, dtype, inits).run(None, {"x": x})[0].astype(np.int64)
        got = build_lut(
            LutSpec(
                function="tanh_mlas",
                in_scale=xs,
                in_zp=xz,
                in_type=dtype,
                out_scale=ys,
                out_zp=yz,
                out_type=dtype,
            )
        )
        assert np.array_equal(got, want), (xs, xz, ys, yz)
