"""Activation tables: ONNX Runtime's meaning of a quantized activation, from the kernel model.

ONNX Runtime evaluates the logistic function its own way (see DESIGN.md: about 1
entry in 50,000 differs from a plain float sigmoid), and which way depends on the CPU
(MLAS's FMA or non-FMA kernel). So the table a check uses is built from the kernel's
bit-exact model of ONNX Runtime (`prover.lut`) with the reference profile's `mlas_fma`
flag, never by running ONNX Runtime on the host: a verdict must not depend on the
machine that runs the check. `ort_table` still runs the host's ONNX Runtime on every
input value; the conformance tests compare the two with the host's FMA flag.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as oh

from compiler.errors import InternalError
from compiler.ir.float_bias import FloatBias, node_proto
from compiler.ir.graph import Graph
from compiler.ir.site import Site
from prover.inttypes import int_type
from prover.lut import build_ort_leaky_relu_table, build_ort_qdq_table, build_ort_sigmoid_table

if TYPE_CHECKING:
    import onnxruntime as ort

_ONNX_TYPES = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8}
_SCALE_TYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}
_NP_SCALE: dict[str, type[np.floating]] = {"float32": np.float32, "float16": np.float16}

# QLinear activations of the com.microsoft domain and their function kinds.
QLINEAR_FUNCTIONS = {"QLinearSigmoid": "sigmoid", "QLinearLeakyRelu": "leakyrelu"}
# Float activations recognised between DequantizeLinear and QuantizeLinear.
QDQ_FUNCTIONS = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Relu": "relu"}


def session(model: onnx.ModelProto | bytes, level: str = "off") -> ort.InferenceSession:
    """The compiler's one ONNX Runtime session factory: CPU, graph optimisations off (the
    reference setting) or, with `level="default"`, ORT's default session level (a host
    step under a reference that is ORT's default session); cached by the serialised model
    and level (a session is built once per distinct model per process; onnxruntime is
    imported on first use)."""
    return _session(model if isinstance(model, bytes) else model.SerializeToString(), level)


@lru_cache(maxsize=256)
def _session(blob: bytes, level: str = "off") -> ort.InferenceSession:
    from npu_backend.ort_logging import onnxruntime_module

    from .options import session_level, session_options

    so = session_options(session_level(level))
    return onnxruntime_module().InferenceSession(blob, so, providers=["CPUExecutionProvider"])


def ort_outputs(
    model_path: str | os.PathLike[str], inputs: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Run the model file in ONNX Runtime (the compiler's `session`: CPU, optimisations off).

    Tensors in external-data files are read from the model's directory (a session made
    from the file's bytes alone has no directory to find them in)."""
    import onnx

    sess = session(onnx.load(str(model_path)))
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, dict(inputs)), strict=True))


@dataclass(frozen=True)
class TableSpec:
    """One quantized activation whose table ONNX Runtime computes.

    `form` is `qlinear` (com.microsoft QLinear<Act>) or `qdq` (DequantizeLinear ->
    <Act> -> QuantizeLinear, both scales of `scale_type`); `alpha` is LeakyRelu's.
    """

    form: str
    op_type: str
    in_scale: float
    in_zp: int
    in_type: str
    out_scale: float
    out_zp: int
    out_type: str
    alpha: float | None = None
    scale_type: str = "float32"


@lru_cache(maxsize=1024)
def reference_table(
    t: TableSpec,
    *,
    fma: bool = True,
    quantize_precision: str = "float32",
    dequantize_type: str | None = None,
) -> tuple[int, ...]:
    """The 256-entry table (offset index order) ONNX Runtime computes, from the kernel model.

    `fma` selects MLAS's FMA or non-FMA logistic/tanh (the reference profile's `mlas_fma`),
    `quantize_precision` the type a QDQ group's QuantizeLinear divides in, `dequantize_type`
    the type of its DequantizeLinear's output in the graph ORT runs
    (`prover.lut.build_ort_qdq_table`).
    """
    form, op_type, scale_type = t.form, t.op_type, t.scale_type
    in_scale, in_zp, in_type = t.in_scale, t.in_zp, t.in_type
    out_scale, out_zp, out_type, alpha = t.out_scale, t.out_zp, t.out_type, t.alpha
    if form == "qlinear" and scale_type != "float32":
        raise ValueError(f"{op_type} takes float32 scales only")
    if form == "qlinear" and op_type == "QLinearSigmoid":
        table = build_ort_sigmoid_table(
            in_scale, in_zp, in_type, out_scale, out_zp, out_type, fused=fma
        )
    elif form == "qlinear" and op_type == "QLinearLeakyRelu":
        a = 0.01 if alpha is None else float(alpha)
        table = build_ort_leaky_relu_table(in_scale, in_zp, in_type, out_scale, out_zp, out_type, a)
    elif form == "qdq" and op_type in QDQ_FUNCTIONS:
        table = build_ort_qdq_table(
            QDQ_FUNCTIONS[op_type],
            in_scale,
            in_zp,
            in_type,
            out_scale,
            out_zp,
            out_type,
            fused=fma,
            scale_type=scale_type,
            quantize_precision=quantize_precision,
            dequantize_type=dequantize_type,
        )
    else:
        raise ValueError(f"no table model for {form} {op_type}")
    return tuple(int(v) for v in table)


def _scale(scale_type: str, value: float) -> float:
    """`value` rounded to the scale type (exact as a Python float: the tensor holds it)."""
    return float(_NP_SCALE[scale_type](value))


@lru_cache(maxsize=1024)
def ort_table(t: TableSpec, opset: int | None = None) -> tuple[int, ...]:
    """The table (offset index order) this host's ONNX Runtime computes for one activation
    (a QDQ group in default-domain `opset`). For conformance tests only: checks use
    `reference_table`.
    """
    form, op_type, scale_type = t.form, t.op_type, t.scale_type
    in_scale, in_zp, in_type = t.in_scale, t.in_zp, t.in_type
    out_scale, out_zp, out_type, alpha = t.out_scale, t.out_zp, t.out_type, t.alpha
    it, ot = int_type(in_type), int_type(out_type)
    xs = np.arange(it.min, it.max + 1, dtype=np.int64).astype(it.numpy_dtype())
    consts = [
        oh.make_tensor("xs", _SCALE_TYPES[scale_type], [], [_scale(scale_type, in_scale)]),
        oh.make_tensor("xz", _ONNX_TYPES[in_type], [], [in_zp]),
        oh.make_tensor("ys", _SCALE_TYPES[scale_type], [], [_scale(scale_type, out_scale)]),
        oh.make_tensor("yz", _ONNX_TYPES[out_type], [], [out_zp]),
    ]
    kw: dict[str, Any] = {} if alpha is None else {"alpha": float(alpha)}
    opsets = [oh.make_opsetid("", opset or (17 if scale_type == "float32" else 19))]
    if form == "qlinear":
        nodes = [
            oh.make_node(
                op_type, ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft", **kw
            )
        ]
        opsets.append(oh.make_opsetid("com.microsoft", 1))
    elif form == "qdq":
        nodes = [
            oh.make_node("DequantizeLinear", ["x", "xs", "xz"], ["f"]),
            oh.make_node(op_type, ["f"], ["g"], **kw),
            oh.make_node("QuantizeLinear", ["g", "ys", "yz"], ["y"]),
        ]
    else:
        raise ValueError(f"unknown activation form {form!r}")
    g = oh.make_graph(
        nodes,
        "table",
        [oh.make_tensor_value_info("x", _ONNX_TYPES[in_type], [it.size])],
        [oh.make_tensor_value_info("y", _ONNX_TYPES[out_type], [it.size])],
        consts,
    )
    m = oh.make_model(g, opset_imports=opsets)
    m.ir_version = min(m.ir_version, 10)  # the newest IR version ORT 1.32 loads
    (y,) = session(m).run(None, {"x": xs})
    table = tuple(int(v) for v in np.asarray(y, dtype=np.int64))
    if min(table) < ot.min or max(table) > ot.max:
        raise AssertionError("ONNX Runtime returned a table outside the output type")
    return table


def float_bias_tables(g: Graph, site: Site, fb: FloatBias) -> tuple[tuple[int, ...], ...]:
    """ORT's value of a float bias group (`compiler.ir.float_bias`) for every 8-bit x, per
    column: the group's own ONNX nodes run in ORT."""
    from onnx import numpy_helper

    dq, add, q = site.chain[fb.start : fb.start + 3]
    protos = []
    for n in (fb.const_node, dq, add, q):
        p = node_proto(n)
        if p is None:
            raise InternalError(f"float bias node '{n.name}' does not hold one ONNX node")
        protos.append(p)
    consts: dict[str, np.ndarray] = {}
    for n in (fb.const_node, dq, add, q):
        consts.update({k: np.asarray(v) for k, v in (n.attrs.get("consts") or {}).items()})
    t = int_type(fb.x_type)
    n_cols = len(fb.const)
    xs = np.repeat(np.arange(t.min, t.max + 1)[:, None], n_cols, axis=1).astype(fb.x_type)
    x_name, y_name = dq.inputs[0], q.output
    elem = oh.np_dtype_to_tensor_dtype(np.dtype(fb.x_type))
    graph = oh.make_graph(
        protos,
        "float_bias",
        [oh.make_tensor_value_info(x_name, elem, list(xs.shape))],
        [oh.make_tensor_value_info(y_name, elem, list(xs.shape))],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    opset = int(g.opsets.get("", g.opsets.get("ai.onnx", 13)))
    m = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = 8
    sess = session(m)
    y = np.asarray(sess.run(None, {x_name: xs})[0], dtype=np.int64)
    return tuple(tuple(int(v) for v in y[:, j]) for j in range(n_cols))
