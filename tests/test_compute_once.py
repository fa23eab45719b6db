"""Compute once: a model is validated once and built into IR once per batch size, also
through the command line (issue 12 item 3). Counted with `compiler.frontend.checked.COUNTS`."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from models import matmul_activation
from onnx import TensorProto as TP
from onnx import helper as oh

from compiler.cli.prover import main
from compiler.errors import FrontendError
from compiler.frontend.batch import PROBE_SIZES
from compiler.frontend.checked import COUNTS, validate
from compiler.frontend.reader import to_ir


def _counted(fn):
    before = dict(COUNTS)
    out = fn()
    return out, {k: COUNTS[k] - before.get(k, 0) for k in ("validated", "built")}


def _dynamic() -> onnx.ModelProto:
    m = matmul_activation()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    return m


def test_a_static_model_is_validated_and_built_once():
    _, n = _counted(lambda: to_ir(matmul_activation()))
    assert n == {"validated": 1, "built": 1}


def test_a_checked_model_is_not_validated_again():
    checked = validate(matmul_activation())
    (g, m), n = _counted(lambda: to_ir(checked))
    assert n == {"validated": 0, "built": 1}
    assert m is checked.proto  # handed on as it is, not copied and checked again


def test_dynamic_batch_builds_each_size_once():
    _, n = _counted(lambda: to_ir(_dynamic()))
    assert n["built"] == len(PROBE_SIZES) + 1  # the probes, then batch 1
    (g, m), n = _counted(lambda: to_ir(_dynamic(), batch=PROBE_SIZES[0]))
    assert n["built"] == len(PROBE_SIZES)  # the probe at that size is the result
    g2, _ = to_ir(m)  # the same model, built alone at that size
    assert {k: v.shape for k, v in g.values.items()} == {k: v.shape for k, v in g2.values.items()}
    assert [(x.op, x.inputs, x.outputs) for x in g.nodes] == [
        (x.op, x.inputs, x.outputs) for x in g2.nodes
    ]
    assert g.dynamic_batch == ("x",) and g2.dynamic_batch == ()


def test_prover_check_parses_and_validates_the_model_once(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(matmul_activation(), path)
    code, n = _counted(lambda: main(["check", str(path), "--proofs-mode", "off"]))
    assert code == 0, capsys.readouterr()
    assert n == {"validated": 1, "built": 1}


def test_a_model_type_checked_inference_rejects_is_bad_input_once(tmp_path, capsys):
    x = oh.make_tensor_value_info("x", TP.FLOAT, [2])
    y = oh.make_tensor_value_info("y", TP.INT32, [2])  # Relu's output is float: inference says so
    g = oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    onnx.checker.check_model(m)  # the checker alone accepts it
    with pytest.raises(FrontendError, match="fails ONNX validation"):
        validate(m)
    path = tmp_path / "bad.onnx"
    onnx.save(m, path)
    code, n = _counted(lambda: main(["check", str(path), "--proofs-mode", "off"]))
    err = capsys.readouterr().err.strip()
    assert code == 2 and "fails ONNX validation" in err and "\n" not in err
    assert n == {"validated": 0, "built": 0}


@pytest.mark.parametrize(
    ("make", "op"), [("matmul_activation", "QLinearMatMul"), ("conv_activation", "QLinearConv")]
)
def test_qlinear_matmul_and_conv_read_their_parameters_alike(make, op):
    """QLinearMatMul / QLinearConv scales and zero points are read alike: a non-scalar
    y_zero_point, which ONNX Runtime's kernels stop on (tests/test_cli_invalid_models.py),
    is bad input for both, in the same words."""
    import models

    m = getattr(models, make)()
    node = next(n for n in m.graph.node if n.op_type == op)
    init = next(i for i in m.graph.initializer if i.name == node.input[7])
    init.CopyFrom(
        onnx.numpy_helper.from_array(
            np.zeros(2, onnx.helper.tensor_dtype_to_np_dtype(init.data_type)), init.name
        )
    )
    msg = f"y_zero_point '{init.name}' has shape \\[2\\]; ONNX Runtime accepts only a scalar or \\[1\\]"
    with pytest.raises(FrontendError, match=msg):
        to_ir(m)
    g, _ = to_ir(getattr(models, make)())
    assert any(n.op == "matmul" for n in g.nodes)
