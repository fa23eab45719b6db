"""Builders of small quantized ONNX models for tests (shared by the whole test suite).

Every builder returns a checked `onnx.ModelProto`; all parameters are keywords with
defaults that give a valid model, so a test states only what it varies. Node names
are stable: `mm` (the compute op), `rq` (Requantize), `clip`, `act` (the activation),
`act2` (a second activation), `reshape`, `transpose`, `quant` (input QuantizeLinear),
`extra` (a second user of the compute output).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

from prover.requant import onnx_requant_scale, quantize_multiplier

NP = {"int8": np.int8, "uint8": np.uint8, "int32": np.int32, "float32": np.float32}
TPT = {"int8": TP.INT8, "uint8": TP.UINT8, "int32": TP.INT32, "float32": TP.FLOAT}
OPSETS = [
    oh.make_opsetid("", 17),
    oh.make_opsetid("com.microsoft", 1),
    oh.make_opsetid("ai.npufusion", 1),
]


def const(name: str, value, dtype: str) -> onnx.TensorProto:
    return nh.from_array(np.asarray(value, dtype=NP[dtype]), name)


def make(
    nodes, inputs, outputs, inits, name: str = "test", full_check: bool = False
) -> onnx.ModelProto:
    g = oh.make_graph(nodes, name, inputs, outputs, inits)
    m = oh.make_model(g, opset_imports=OPSETS)
    onnx.checker.check_model(m, full_check=full_check)
    return m


def weights(K: int, N: int, seed: int = 0, dtype: str = "int8") -> np.ndarray:
    rng = np.random.default_rng(seed)
    lo, hi = (-127, 128) if dtype == "int8" else (0, 256)
    return rng.integers(lo, hi, size=(K, N)).astype(NP[dtype])


def requantize_node(
    inp: str,
    out: str,
    *,
    multiplier: int,
    shift: int,
    zero_point: int = 0,
    rounding: str = "double",
    output_type: str = "int8",
    name: str = "rq",
    scale: float | None = None,
) -> onnx.NodeProto:
    """The project-domain integer Requantize (ai.npufusion)."""
    kw = dict(
        multiplier=multiplier,
        shift=shift,
        zero_point=zero_point,
        rounding=rounding,
        output_type=output_type,
    )
    if scale is not None:
        kw["scale"] = float(scale)
    return oh.make_node("Requantize", [inp], [out], domain="ai.npufusion", name=name, **kw)


def matmul_activation(
    K: int = 16,
    N: int = 8,
    M: int = 2,
    *,
    form: str = "qlinear",
    activation: str = "sigmoid",
    act_form: str = "qlinear",
    a_scale: float = 0.02,
    a_zp: int = 0,
    w_scale: float | Sequence[float] = 0.01,
    w_zp: int = 0,
    y_scale: float = 0.05,
    y_zp: int = 0,
    out_scale: float = 1 / 256,
    out_zp: int = -128,
    per_channel: bool = False,
    clip: tuple[int, int] | None = None,
    requantize: dict | None = None,
    extra_user: str | None = None,
    double_activation: bool = False,
    reshape: str | None = None,
    transpose: Sequence[int] | None = None,
    float_input: bool = False,
    float_roundtrip: bool = False,
    roundtrip_op: str = "Hardmax",
    clip_acc: tuple[int, int] | None = None,
    inter_type: str = "int8",
    seed: int = 0,
    w: np.ndarray | None = None,
) -> onnx.ModelProto:
    """`x[M,K] -> MatMul(W[K,N]) -> [Requantize] -> [Reshape] -> [Transpose] -> [Clip] -> Act -> [Act]`.

    - form: `qlinear` (QLinearMatMul), `integer` (MatMulInteger, then a Requantize to
      int8 is always inserted: `requantize` or one derived from the scales), `qdq`
      (DequantizeLinear x, W -> float MatMul -> QuantizeLinear);
    - activation/act_form: `sigmoid`|`leakyrelu` as com.microsoft QLinear ops
      (`qlinear`) or `sigmoid`|`tanh`|`relu` as DequantizeLinear -> Act -> QuantizeLinear (`qdq`);
    - per_channel: per-column weight scales (`w_scale` * (1 + j/N) unless a sequence is given);
    - clip: integer Clip(lo, hi) on the activation's input;
    - requantize: kwargs of `requantize_node` (multiplier, shift, zero_point, rounding,
      output_type) inserted after the compute op;
    - extra_user: `node` (the compute result also feeds a Clip producing output `extra`)
      or `output` (the compute result is also a graph output);
    - double_activation: a second activation of the same kind after the first;
    - reshape: `noop` (Reshape to the same shape), `unit` ([M,N] -> [1,M,N]) or
      `permute` ([M,N] -> [N,M], a hidden transpose); transpose: a Transpose perm;
    - float_input: the model input is float32 and quantized by a QuantizeLinear `quant`;
    - float_roundtrip: DequantizeLinear `rt_dq` -> `roundtrip_op` `rt_abs` -> QuantizeLinear
      `rt_q` between the compute op and the activation (with the default Hardmax, which is
      not elementwise, a non-absorbable chain; an elementwise op such as Abs makes the chain
      and the activation one unary region; without the op, ORT's default session removes the
      identity DQ -> Q pair and the two are adjacent);
    - clip_acc: an int32 Clip `clip_acc` on the MatMulInteger accumulator (form `integer`);
    - inter_type: type of the compute output / activation input (`int8` or `uint8`); the
      activation keeps it for its output (com.microsoft QLinear ops do).
    """
    W = weights(K, N, seed) if w is None else np.asarray(w, dtype=np.int8)
    K, N = W.shape
    if per_channel:
        ws = np.asarray(
            w_scale if isinstance(w_scale, Sequence) else [w_scale * (1 + j / N) for j in range(N)],
            dtype=np.float32,
        )
    else:
        ws = np.float32(w_scale)
    nodes, inits = [], [const("W", W, "int8")]
    inputs = []
    # ONNX Runtime has no QLinearMatMul for int8 x int8 -> uint8: a uint8 output takes a
    # uint8 activation (u8s8u8)
    a_type = "uint8" if inter_type == "uint8" else "int8"
    if float_input:
        inputs.append(oh.make_tensor_value_info("x_f", TP.FLOAT, [M, K]))
        inits += [const("x_s", a_scale, "float32"), const("x_z", a_zp, a_type)]
        nodes.append(oh.make_node("QuantizeLinear", ["x_f", "x_s", "x_z"], ["x"], name="quant"))
    else:
        inputs.append(oh.make_tensor_value_info("x", getattr(TP, a_type.upper()), [M, K]))
    inits += [
        const("a_s", a_scale, "float32"),
        const("a_z", a_zp, a_type),
        const("w_s", ws, "float32"),
        const("w_z", w_zp, "int8"),
        const("y_s", y_scale, "float32"),
        const("y_z", y_zp, inter_type),
        const("o_s", out_scale, "float32"),
        const("o_z", out_zp, inter_type),
    ]
    cur = "mm_out"
    if form == "qlinear":
        nodes.append(
            oh.make_node(
                "QLinearMatMul",
                ["x", "a_s", "a_z", "W", "w_s", "w_z", "y_s", "y_z"],
                [cur],
                name="mm",
            )
        )
    elif form == "integer":
        nodes.append(oh.make_node("MatMulInteger", ["x", "W", "a_z", "w_z"], [cur], name="mm"))
        if requantize is None:
            scale = float(np.max(onnx_requant_scale(a_scale, np.max(ws), y_scale)))
            m_, s_ = quantize_multiplier(scale)
            requantize = dict(multiplier=m_, shift=s_, zero_point=y_zp)
    elif form in ("qdq", "qdq_gemm"):
        nodes += [
            oh.make_node("DequantizeLinear", ["x", "a_s", "a_z"], ["x_dq"], name="dq_x"),
            oh.make_node(
                "DequantizeLinear",
                ["W", "w_s", "w_z"] if not per_channel else ["W", "w_s", "w_zc"],
                ["w_dq"],
                name="dq_w",
                **({"axis": 1} if per_channel else {}),
            ),
            oh.make_node(
                "MatMul" if form == "qdq" else "Gemm", ["x_dq", "w_dq"], ["mm_f"], name="mm"
            ),
            oh.make_node("QuantizeLinear", ["mm_f", "y_s", "y_z"], [cur], name="q_mm"),
        ]
        if per_channel:
            inits.append(const("w_zc", np.full(N, w_zp), "int8"))
    else:
        raise ValueError(form)
    mm_out = cur
    if clip_acc is not None:
        inits += [const("ca_lo", clip_acc[0], "int32"), const("ca_hi", clip_acc[1], "int32")]
        nodes.append(
            oh.make_node("Clip", [cur, "ca_lo", "ca_hi"], ["clipped_acc"], name="clip_acc")
        )
        cur = "clipped_acc"
    if requantize is not None:
        nodes.append(requantize_node(cur, "rq_out", **requantize))
        cur = "rq_out"
    if float_roundtrip:
        nodes += [
            oh.make_node("DequantizeLinear", [cur, "y_s", "y_z"], ["rt_f"], name="rt_dq"),
            oh.make_node(roundtrip_op, ["rt_f"], ["rt_abs"], name="rt_abs"),
            oh.make_node("QuantizeLinear", ["rt_abs", "y_s", "y_z"], ["rt_out"], name="rt_q"),
        ]
        cur = "rt_out"
    shape = [M, N]
    if reshape is not None:
        shape = {"noop": [M, N], "unit": [1, M, N], "permute": [N, M]}[reshape]
        inits.append(nh.from_array(np.asarray(shape, dtype=np.int64), "shape"))
        nodes.append(oh.make_node("Reshape", [cur, "shape"], ["reshaped"], name="reshape"))
        cur = "reshaped"
    if transpose is not None:
        nodes.append(
            oh.make_node("Transpose", [cur], ["transposed"], name="transpose", perm=list(transpose))
        )
        shape = [shape[p] for p in transpose]
        cur = "transposed"
    if clip is not None:
        inits += [const("c_lo", clip[0], "int8"), const("c_hi", clip[1], "int8")]
        nodes.append(oh.make_node("Clip", [cur, "c_lo", "c_hi"], ["clipped"], name="clip"))
        cur = "clipped"
    n_act = 2 if double_activation else 1
    for i in range(n_act):
        name = "act" if i == 0 else "act2"
        out = "y" if i == n_act - 1 else "act_out"
        nodes += _activation(
            activation,
            act_form,
            cur,
            out,
            name,
            (y_scale, y_zp) if i == 0 else (out_scale, out_zp),
            (out_scale, out_zp),
            inits,
            inter_type,
        )
        cur = out
    outputs = [oh.make_tensor_value_info("y", TPT[inter_type], shape)]
    if extra_user == "node":
        inits += [const("e_lo", -100, "int8"), const("e_hi", 100, "int8")]
        nodes.append(oh.make_node("Clip", [mm_out, "e_lo", "e_hi"], ["extra"], name="extra"))
        outputs.append(
            oh.make_tensor_value_info("extra", TP.INT8 if form != "integer" else TP.INT32, [M, N])
        )
    elif extra_user == "output":
        outputs.append(
            oh.make_tensor_value_info(mm_out, TP.INT8 if form != "integer" else TP.INT32, [M, N])
        )
    return make(nodes, inputs, outputs, inits)


def _activation(
    kind: str, act_form: str, inp: str, out: str, name: str, in_q, out_q, inits, zp_type="int8"
) -> list:
    s_in, z_in = f"{name}_is", f"{name}_iz"
    s_out, z_out = f"{name}_os", f"{name}_oz"
    inits += [
        const(s_in, in_q[0], "float32"),
        const(z_in, in_q[1], zp_type),
        const(s_out, out_q[0], "float32"),
        const(z_out, out_q[1], zp_type),
    ]
    if act_form == "qlinear":
        op_type = {"sigmoid": "QLinearSigmoid", "leakyrelu": "QLinearLeakyRelu"}[kind]
        return [
            oh.make_node(
                op_type, [inp, s_in, z_in, s_out, z_out], [out], name=name, domain="com.microsoft"
            )
        ]
    op_type = {"sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu"}[kind]
    return [
        oh.make_node("DequantizeLinear", [inp, s_in, z_in], [f"{name}_f"], name=f"{name}_dq"),
        oh.make_node(op_type, [f"{name}_f"], [f"{name}_g"], name=name),
        oh.make_node("QuantizeLinear", [f"{name}_g", s_out, z_out], [out], name=f"{name}_q"),
    ]


def sigmoid_site(
    i: int, shape: tuple[int, int, int], *, w_seed: int, y_scale: float, matmul: list | None = None
) -> tuple[list, list, onnx.ValueInfoProto, onnx.ValueInfoProto]:
    """One x{i} -> mm{i} -> h{i} -> QLinearSigmoid act{i} -> y{i} site of (M, K, N) `shape`:
    its nodes, initializers, input and output. `matmul` replaces the default QLinearMatMul
    (it must read x{i} and write h{i} quantized by y_s{i}, z{i})."""
    m, k, n = shape
    inits = [
        const(f"W{i}", weights(k, n, w_seed), "int8"),
        const(f"a_s{i}", 0.02, "float32"),
        const(f"z{i}", 0, "int8"),
        const(f"w_s{i}", 0.01, "float32"),
        const(f"y_s{i}", y_scale, "float32"),
        const(f"o_s{i}", 1 / 256, "float32"),
        const(f"o_z{i}", -128, "int8"),
    ]
    qargs = [f"x{i}", f"a_s{i}", f"z{i}", f"W{i}", f"w_s{i}", f"z{i}", f"y_s{i}", f"z{i}"]
    nodes = matmul or [oh.make_node("QLinearMatMul", qargs, [f"h{i}"], name=f"mm{i}")]
    nodes = [
        *nodes,
        oh.make_node(
            "QLinearSigmoid",
            [f"h{i}", f"y_s{i}", f"z{i}", f"o_s{i}", f"o_z{i}"],
            [f"y{i}"],
            name=f"act{i}",
            domain="com.microsoft",
        ),
    ]
    x = oh.make_tensor_value_info(f"x{i}", TP.INT8, [m, k])
    y = oh.make_tensor_value_info(f"y{i}", TP.INT8, [m, n])
    return nodes, inits, x, y


def two_sites(
    K: int = 16, N: int = 4, M: int = 2, *, seed: int = 0, second_scale: float = 0.05
) -> onnx.ModelProto:
    """Two independent MatMul -> Sigmoid chains in one model (inputs `x1`, `x2`; outputs `y1`, `y2`)."""
    nodes, inits, inputs, outputs = [], [], [], []
    for i, ysc in ((1, 0.05), (2, second_scale)):
        n, c, x, y = sigmoid_site(i, (M, K, N), w_seed=seed + i, y_scale=ysc)
        nodes += n
        inits += c
        inputs.append(x)
        outputs.append(y)
    return make(nodes, inputs, outputs, inits)


def random_inputs(
    model: onnx.ModelProto, seed: int = 0, n: int | None = None
) -> dict[str, np.ndarray]:
    """Random inputs for every graph input (int8 full range, float32 in [-3, 3])."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        t = vi.type.tensor_type.elem_type
        if t == TP.FLOAT:
            out[vi.name] = rng.uniform(-3, 3, size=shape).astype(np.float32)
        elif t == TP.UINT8:
            out[vi.name] = rng.integers(0, 256, size=shape).astype(np.uint8)
        else:
            out[vi.name] = rng.integers(-128, 128, size=shape).astype(np.int8)
    return out


def conv_activation(
    C_in: int = 8,
    C_out: int = 4,
    H: int = 2,
    W: int = 3,
    *,
    activation: str = "sigmoid",
    act_form: str = "qlinear",
    per_channel: bool = False,
    bias: bool = False,
    x_scale: float = 0.02,
    w_scale: float = 0.01,
    y_scale: float = 0.05,
    out_scale: float = 1 / 256,
    out_zp: int = -128,
    kernel: int = 1,
    seed: int = 0,
) -> onnx.ModelProto:
    """`x[1,C_in,H,W] -> QLinearConv(1x1, W[C_out,C_in,1,1]) 'conv' -> activation 'act'` (NCHW).

    `kernel` > 1 builds a KxK convolution (pads keep the size).
    """
    Wt = weights(C_out, C_in * kernel * kernel, seed).reshape(C_out, C_in, kernel, kernel)
    ws = (
        np.asarray([w_scale * (1 + j / C_out) for j in range(C_out)], np.float32)
        if per_channel
        else np.float32(w_scale)
    )
    inits = [
        const("W", Wt, "int8"),
        const("x_s", x_scale, "float32"),
        const("x_z", 0, "int8"),
        const("w_s", ws, "float32"),
        const("w_z", np.zeros(C_out) if per_channel else 0, "int8"),
        const("y_s", y_scale, "float32"),
        const("y_z", 0, "int8"),
    ]
    ins = ["x", "x_s", "x_z", "W", "w_s", "w_z", "y_s", "y_z"]
    if bias:
        inits.append(const("B", np.arange(C_out) * 37 - 50, "int32"))
        ins.append("B")
    pad = (kernel - 1) // 2
    nodes = [oh.make_node("QLinearConv", ins, ["conv_out"], name="conv", pads=[pad] * 4)]
    nodes += _activation(
        activation, act_form, "conv_out", "y", "act", (y_scale, 0), (out_scale, out_zp), inits
    )
    return make(
        nodes,
        [oh.make_tensor_value_info("x", TP.INT8, [1, C_in, H, W])],
        [oh.make_tensor_value_info("y", TP.INT8, [1, C_out, H, W])],
        inits,
    )
