"""Unary-region models: a QLinearMatMul or a 1x1 QLinearConv, then an elementwise region."""

from __future__ import annotations

import numpy as np
import onnx
from models import const, make, weights
from onnx import TensorProto as TP
from onnx import helper as oh

U_SCALE, U_ZP = 0.05, 0
Y_SCALE, Y_ZP = 1 / 64, -32


def _dq(x: str, out: str, name: str) -> onnx.NodeProto:
    return oh.make_node("DequantizeLinear", [x, "u_s", "u_z"], [out], name=name)


def _q(x: str, out: str, name: str, s: str = "y_s", z: str = "y_z") -> onnx.NodeProto:
    return oh.make_node("QuantizeLinear", [x, s, z], [out], name=name)


def region(kind: str, u: str = "u", y: str = "y") -> tuple[list[onnx.NodeProto], list]:
    """The nodes (and their constants) of region `kind` from `u` to `y`."""
    c = []
    f = [_dq(u, "f", "dq")]
    if kind == "hardsigmoid":
        f.append(oh.make_node("HardSigmoid", ["f"], ["g"], name="hs", alpha=1 / 6, beta=0.5))
    elif kind == "hardswish":
        f.append(oh.make_node("HardSwish", ["f"], ["g"], name="hsw"))
    elif kind == "silu":
        f += [
            oh.make_node("Sigmoid", ["f"], ["s"], name="sig"),
            oh.make_node("Mul", ["f", "s"], ["g"], name="mul"),
        ]
    elif kind == "silu_qdq":  # the Sigmoid requantized in between (a chain of two islands)
        f += [
            oh.make_node("Sigmoid", ["f"], ["s"], name="sig"),
            _q("s", "sq", "sig_q", "s_s", "s_z"),
            oh.make_node("DequantizeLinear", ["sq", "s_s", "s_z"], ["sf"], name="sig_dq"),
            oh.make_node("Mul", ["f", "sf"], ["g"], name="mul"),
        ]
        c += [const("s_s", 1 / 256, "float32"), const("s_z", -128, "int8")]
    elif kind == "gelu_erf":
        c += [const("sqrt2", np.sqrt(2.0), "float32"), const("one", 1.0, "float32"),
              const("half", 0.5, "float32")]  # fmt: skip
        f += [
            oh.make_node("Div", ["f", "sqrt2"], ["d"], name="div"),
            oh.make_node("Erf", ["d"], ["e"], name="erf"),
            oh.make_node("Add", ["e", "one"], ["a"], name="add"),
            oh.make_node("Mul", ["f", "a"], ["m"], name="mul"),
            oh.make_node("Mul", ["m", "half"], ["g"], name="mul_half"),
        ]
    elif kind == "gelu_tanh":
        c += [const("k", np.sqrt(2 / np.pi), "float32"), const("c3", 0.044715, "float32"),
              const("one", 1.0, "float32"), const("half", 0.5, "float32"),
              const("three", 3.0, "float32")]  # fmt: skip
        f += [
            oh.make_node("Pow", ["f", "three"], ["p"], name="pow"),
            oh.make_node("Mul", ["p", "c3"], ["pc"], name="mul_c"),
            oh.make_node("Add", ["f", "pc"], ["ap"], name="add_p"),
            oh.make_node("Mul", ["ap", "k"], ["ak"], name="mul_k"),
            oh.make_node("Tanh", ["ak"], ["t"], name="tanh"),
            oh.make_node("Add", ["t", "one"], ["t1"], name="add_1"),
            oh.make_node("Mul", ["f", "t1"], ["ft"], name="mul_f"),
            oh.make_node("Mul", ["ft", "half"], ["g"], name="mul_half"),
        ]
    elif kind == "leakyrelu":
        f.append(oh.make_node("LeakyRelu", ["f"], ["g"], name="lrelu", alpha=0.1))
    elif kind == "chain":  # HardSwish, requantized, then Tanh
        f += [
            oh.make_node("HardSwish", ["f"], ["h"], name="hsw"),
            _q("h", "hq", "hsw_q", "u_s", "u_z"),
            _dq("hq", "hf", "hsw_dq"),
            oh.make_node("Tanh", ["hf"], ["g"], name="tanh"),
        ]
    elif kind == "qlinear_silu":  # QOperator: QLinearMul(U, QLinearSigmoid(U))
        c += [const("s_s", 1 / 256, "float32"), const("s_z", -128, "int8")]
        ms = "com.microsoft"
        return [
            oh.make_node("QLinearSigmoid", [u, "u_s", "u_z", "s_s", "s_z"], ["sq"], name="sig",
                         domain=ms),
            oh.make_node("QLinearMul", [u, "u_s", "u_z", "sq", "s_s", "s_z", "y_s", "y_z"], [y],
                         name="mul", domain=ms),
        ], c  # fmt: skip
    elif kind == "softmax":
        f.append(oh.make_node("Softmax", ["f"], ["g"], name="softmax", axis=-1))
    elif kind == "reducemean":
        f += [
            oh.make_node("ReduceMean", ["f"], ["r"], name="mean", axes=[-1], keepdims=1),
            oh.make_node("Sub", ["f", "r"], ["g"], name="sub"),
        ]
    elif kind == "sigmoid_used_outside":  # the float sigmoid also feeds a reduction
        f += [
            oh.make_node("Sigmoid", ["f"], ["g"], name="sig"),
            oh.make_node("ReduceMean", ["g"], ["r"], name="mean", axes=[-1], keepdims=1),
            _q("r", "y2", "mean_q"),
        ]
    elif kind == "second_input":  # Mul(DQ(u), DQ(x_other)): two varying operands
        f += [
            oh.make_node("DequantizeLinear", ["other", "u_s", "u_z"], ["o"], name="dq_other"),
            oh.make_node("Mul", ["f", "o"], ["p"], name="mul"),
            oh.make_node("HardSwish", ["p"], ["g"], name="hsw"),
        ]
    else:
        raise ValueError(kind)
    f.append(_q("g", y, "q"))
    return f, c


def _common_inits() -> list:
    return [
        const("u_s", U_SCALE, "float32"),
        const("u_z", U_ZP, "int8"),
        const("y_s", Y_SCALE, "float32"),
        const("y_z", Y_ZP, "int8"),
    ]


def matmul_region(
    kind: str, M: int = 2, K: int = 16, N: int = 8, extra: str = ""
) -> onnx.ModelProto:
    """`x[M,K] -> QLinearMatMul 'mm' -> u -> region(kind) -> y`; `extra="output"`: the
    region's intermediate (its first non-DQ value) is also a graph output."""
    inits = [
        const("W", weights(K, N, 0), "int8"),
        const("x_s", 0.02, "float32"),
        const("x_z", 0, "int8"),
        const("w_s", 0.01, "float32"),
        const("w_z", 0, "int8"),
        *_common_inits(),
    ]
    nodes = [
        oh.make_node(
            "QLinearMatMul",
            ["x", "x_s", "x_z", "W", "w_s", "w_z", "u_s", "u_z"],
            ["u"],
            name="mm",
        )
    ]
    rn, rc = region(kind)
    nodes += rn
    inits += rc
    inputs = [oh.make_tensor_value_info("x", TP.INT8, [M, K])]
    if kind == "second_input":
        inputs.append(oh.make_tensor_value_info("other", TP.INT8, [M, N]))
    outputs = [oh.make_tensor_value_info("y", TP.INT8, [M, N])]
    if extra == "output":
        outputs.append(oh.make_tensor_value_info("sq", TP.INT8, [M, N]))
    return make(nodes, inputs, outputs, inits)


def conv_region(
    kind: str,
    C_in: int = 8,
    C_out: int = 4,
    H: int = 2,
    W: int = 3,
    *,
    kernel: int = 1,
    group: int = 1,
) -> onnx.ModelProto:
    """`x[1,C_in,H,W] -> QLinearConv 'conv' (1x1, or kernel x kernel with same padding,
    `group` groups: C_in for depthwise) -> u -> region(kind) -> y`."""
    cin_g = C_in // group
    Wt = weights(C_out, cin_g * kernel * kernel, 1).reshape(C_out, cin_g, kernel, kernel)
    window = {} if kernel == 1 else {"pads": [kernel // 2] * 4, "group": group}
    inits = [
        const("W", Wt, "int8"),
        const("x_s", 0.02, "float32"),
        const("x_z", 0, "int8"),
        const("w_s", 0.01, "float32"),
        const("w_z", 0, "int8"),
        *_common_inits(),
    ]
    nodes = [
        oh.make_node(
            "QLinearConv",
            ["x", "x_s", "x_z", "W", "w_s", "w_z", "u_s", "u_z"],
            ["u"],
            name="conv",
            **window,
        )
    ]
    rn, rc = region(kind)
    nodes += rn
    inits += rc
    return make(
        nodes,
        [oh.make_tensor_value_info("x", TP.INT8, [1, C_in, H, W])],
        [oh.make_tensor_value_info("y", TP.INT8, [1, C_out, H, W])],
        inits,
    )


def qdq_conv_region(kind: str) -> onnx.ModelProto:
    """QDQ form, uint8 activations: `DQ(x), DQ(W) -> 1x1 Conv -> Q 'conv_q' -> region(kind)`
    (ORT's default session makes the conv a QLinearConv; the region stays a float island)."""
    Wt = weights(4, 8, 1).reshape(4, 8, 1, 1)
    inits = [
        const("W", Wt, "int8"),
        const("x_s", 0.02, "float32"),
        const("x_z", 0, "uint8"),
        const("w_s", 0.01, "float32"),
        const("w_z", 0, "int8"),
        const("u_s", U_SCALE, "float32"),
        const("u_z", 128, "uint8"),
        const("y_s", Y_SCALE, "float32"),
        const("y_z", 100, "uint8"),
    ]
    nodes = [
        oh.make_node("DequantizeLinear", ["x", "x_s", "x_z"], ["xf"], name="x_dq"),
        oh.make_node("DequantizeLinear", ["W", "w_s", "w_z"], ["wf"], name="w_dq"),
        oh.make_node("Conv", ["xf", "wf"], ["cf"], name="conv"),
        oh.make_node("QuantizeLinear", ["cf", "u_s", "u_z"], ["u"], name="conv_q"),
    ]
    rn, rc = region(kind)
    nodes += rn
    inits += [c for c in rc if c.name != "s_z"]
    if any(c.name == "s_z" for c in rc):
        inits.append(const("s_z", 0, "uint8"))
    return make(
        nodes,
        [oh.make_tensor_value_info("x", TP.UINT8, [1, 8, 2, 3])],
        [oh.make_tensor_value_info("y", TP.UINT8, [1, 4, 2, 3])],
        inits,
    )


def gemm_region(kind: str, M: int = 2, K: int = 16, N: int = 8) -> onnx.ModelProto:
    """`x[M,K] -> com.microsoft QGemm 'gemm' (an int32 bias) -> u -> region(kind) -> y`."""
    inits = [
        const("W", weights(K, N, 0), "int8"),
        const("x_s", 0.02, "float32"),
        const("x_z", 0, "int8"),
        const("w_s", 0.01, "float32"),
        const("w_z", 0, "int8"),
        const("bias", np.arange(-4, 4) * 37, "int32"),
        *_common_inits(),
    ]
    nodes = [
        oh.make_node(
            "QGemm",
            ["x", "x_s", "x_z", "W", "w_s", "w_z", "bias", "u_s", "u_z"],
            ["u"],
            name="gemm",
            domain="com.microsoft",
        )
    ]
    rn, rc = region(kind)
    return make(
        nodes + rn,
        [oh.make_tensor_value_info("x", TP.INT8, [M, K])],
        [oh.make_tensor_value_info("y", TP.INT8, [M, N])],
        inits + rc,
    )


def integer_region(kind: str, M: int = 2, K: int = 16, N: int = 8) -> onnx.ModelProto:
    """`x[M,K] -> MatMulInteger 'mm' -> int32 -> Requantize 'rq' (ai.npufusion, double
    rounding) -> u -> region(kind) -> y`: the integer compute path's own requantization."""
    from models import requantize_node

    inits = [const("W", weights(K, N, 0), "int8"), *_common_inits()]
    nodes = [
        oh.make_node("MatMulInteger", ["x", "W"], ["acc"], name="mm"),
        requantize_node("acc", "u", multiplier=1 << 30, shift=9, name="rq"),
    ]
    rn, rc = region(kind)
    return make(
        nodes + rn,
        [oh.make_tensor_value_info("x", TP.INT8, [M, K])],
        [oh.make_tensor_value_info("y", TP.INT8, [M, N])],
        inits + rc,
    )


def eltwise_region(kind: str, M: int = 2, N: int = 8) -> onnx.ModelProto:
    """`x[M,N] -> com.microsoft QLinearAdd 'add' (x + a constant) -> u -> region(kind) -> y`:
    a region after an elementwise op, no compute op."""
    inits = [
        const("x_s", 0.04, "float32"),
        const("x_z", 3, "int8"),
        const("c", 17, "int8"),
        const("c_s", 0.03, "float32"),
        const("c_z", 0, "int8"),
        *_common_inits(),
    ]
    nodes = [
        oh.make_node(
            "QLinearAdd",
            ["x", "x_s", "x_z", "c", "c_s", "c_z", "u_s", "u_z"],
            ["u"],
            name="add",
            domain="com.microsoft",
        )
    ]
    rn, rc = region(kind)
    return make(
        nodes + rn,
        [oh.make_tensor_value_info("x", TP.INT8, [M, N])],
        [oh.make_tensor_value_info("y", TP.INT8, [M, N])],
        inits + rc,
    )
