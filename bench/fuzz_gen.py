"""Random quantized ONNX models for the differential fuzzer (`fuzz_diff.py`).

`random_spec(rng)` draws a `Spec` (a plain dict, JSON-able, so a reproducer can say
what was drawn); `build(spec)` turns it into an `onnx.ModelProto`. The shape is

    x[M, K] -> compute -> [Requantize] -> [Reshape to 1xMxN] -> [Clip] -> [island] -> act* -> y

compute: QLinearMatMul | MatMulInteger (+ Requantize, or the raw int32 output) | QDQ
(DequantizeLinear x, W -> MatMul -> QuantizeLinear) | none (activations on x);
act: com.microsoft QLinearSigmoid / QLinearLeakyRelu, or DequantizeLinear -> Sigmoid |
Tanh | Relu -> QuantizeLinear with float32 or float16 scales (opset >= 19) and, at opset
21, QuantizeLinear `output_dtype` without a zero point; island: a float host subgraph
DequantizeLinear -> f -> QuantizeLinear that ORT's default session rewrites (layer norm,
GELU in its Erf and tanh forms, Softmax, a float Conv or MatMul whose float weights ORT
quantizes), drawn last so the draws before it do not depend on it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

NP = {"int8": np.int8, "uint8": np.uint8, "int32": np.int32}
TPT = {"int8": TP.INT8, "uint8": TP.UINT8, "int32": TP.INT32}
RANGE = {"int8": (-128, 127), "uint8": (0, 255)}
ISLANDS = ("layernorm", "gelu_erf", "gelu_tanh", "softmax", "conv", "matmul_float_w")
ACTS = ("qlinear_sigmoid", "qlinear_leakyrelu", "qdq_sigmoid", "qdq_tanh", "qdq_relu")
PROJECT_DOMAIN = "ai.npufusion"
MS_DOMAIN = "com.microsoft"

Spec = dict[str, Any]


def _ir_version(opset: int) -> int:
    """The lowest IR version that carries `opset` (ONNX's table: 13-14 -> 7 ... 21 -> 10)."""
    return 7 if opset <= 14 else 8 if opset <= 18 else 9 if opset <= 20 else 10


def _pick(rng: np.random.Generator, items, p=None):
    return items[int(rng.choice(len(items), p=p))]


def _scale(rng: np.random.Generator, typical: float) -> float:
    """A positive float32 scale: near `typical` mostly, else anywhere in 1e-8..1e4 or 2^k."""
    u = rng.random()
    if u < 0.2:
        return float(np.float32(2.0 ** int(rng.integers(-26, 14))))
    if u < 0.3:
        return float(np.float32(10 ** rng.uniform(-8, 4)))
    if u < 0.4:  # a power of two near the typical scale (exact products: rounding ties)
        return float(np.float32(2.0 ** round(math.log2(typical) + rng.integers(-2, 3))))
    return float(np.float32(typical * 10 ** rng.uniform(-0.7, 0.7)))


def _zp(rng: np.random.Generator, dtype: str) -> int:
    lo, hi = RANGE[dtype]
    u = rng.random()
    if u < 0.15:
        return lo
    if u < 0.3:
        return hi
    if u < 0.55:
        return 0 if dtype == "int8" else 128
    return int(rng.integers(lo, hi + 1))


def _weights(rng: np.random.Generator, K: int, N: int, dtype: str) -> list:
    lo, hi = RANGE[dtype]
    w = rng.integers(lo, hi + 1, size=(K, N))
    if rng.random() < 0.2:  # a column at an extreme (the largest accumulators)
        j = int(rng.integers(0, N))
        w[:, j] = hi if rng.random() < 0.6 else lo
    if rng.random() < 0.1:
        w = np.where(rng.random((K, N)) < 0.5, lo, hi)
    return w.astype(np.int64).tolist()


def random_spec(rng: np.random.Generator) -> Spec:
    """Draw one model description (deterministic for the generator's state)."""
    opset = int(rng.integers(13, 22))
    compute = _pick(rng, ("qlinear", "integer", "qdq", "none"), p=(0.4, 0.2, 0.25, 0.15))
    qdq_gemm = bool(rng.random() < 0.3)
    a_type = _pick(rng, ("int8", "uint8"))
    w_type = _pick(rng, ("int8", "uint8"))
    if compute == "qlinear" and a_type == "int8" and w_type == "uint8" and rng.random() < 0.9:
        w_type = "int8"  # ORT has no s8u8 QLinearMatMul; keep a few to see the frontend's answer
    K = int(_pick(rng, (1, 2, 3, 4, 7, 8, 16, 31, 64, 128, 256, 1024)))
    N = int(rng.integers(1, 9))
    M = int(rng.integers(1, 5))
    spec: Spec = {
        "opset": opset,
        "compute": compute,
        "a_type": a_type,
        "M": M,
        "K": K if compute != "none" else N,
        "N": N,
        "target": _pick(rng, ("npu_float", "npu_fixed")),
        "policy": _pick(rng, ("bitwise", "bounded:1", "bounded:2"), p=(0.6, 0.3, 0.1)),
    }
    if compute == "qdq" and qdq_gemm:
        spec["qdq_op"] = "Gemm"
    cur_type = a_type
    cur_scale = _scale(rng, 0.02)
    spec["a_scale"] = cur_scale
    spec["a_zp"] = _zp(rng, a_type)
    if compute != "none":
        per_col = bool(rng.random() < 0.4)
        w_scale = _scale(rng, 0.01)
        spec.update(
            w_type=w_type,
            w=_weights(rng, K, N, w_type),
            per_column=per_col,
            w_scale=[_scale(rng, w_scale) for _ in range(N)] if per_col else w_scale,
            w_zp=[_zp(rng, w_type) for _ in range(N)]
            if per_col and rng.random() < 0.5
            else (_zp(rng, w_type) if rng.random() < 0.5 else (0 if w_type == "int8" else 128)),
        )
        typ_acc = 64.0 * math.sqrt(K) * 4
        y_type = a_type if rng.random() < 0.9 else _pick(rng, ("int8", "uint8"))
        y_scale = _scale(rng, cur_scale * w_scale * typ_acc / 64)
        spec.update(y_type=y_type, y_scale=y_scale, y_zp=_zp(rng, y_type))
        cur_type, cur_scale = y_type, y_scale
        if compute == "integer":
            u = rng.random()
            if u < 0.15:
                spec["raw_int32"] = True
                return spec
            rq_type = _pick(rng, ("int8", "uint8"))
            real = spec["a_scale"] * w_scale / y_scale
            spec["requantize"] = _requantize(rng, real, rq_type)
            cur_type = rq_type
        elif rng.random() < 0.1:
            spec["requantize"] = _requantize(rng, 10 ** rng.uniform(-1.5, 0.3), cur_type)
            cur_type = spec["requantize"]["output_type"]
        spec["reshape_unit"] = bool(rng.random() < 0.2)
    if rng.random() < 0.2:
        lo, hi = RANGE[cur_type]
        a, b = sorted(int(v) for v in rng.integers(lo, hi + 1, size=2))
        spec["clip"] = (a, b) if rng.random() < 0.7 else (lo, hi)
    n_act = int(_pick(rng, (0, 1, 1, 1, 1, 2, 2))) if compute != "none" else int(rng.integers(1, 3))
    acts = []
    for _ in range(n_act):
        kind = _pick(rng, ACTS, p=(0.35, 0.08, 0.25, 0.2, 0.12))
        act: dict[str, Any] = {"kind": kind, "in_scale": cur_scale, "in_zp": None}
        if rng.random() < 0.25:
            act["in_scale"] = _scale(rng, 0.06)
        act["in_zp"] = (
            _zp(rng, cur_type)
            if rng.random() < 0.4
            else (spec.get("y_zp", spec["a_zp"]) if not acts else acts[-1]["out_zp"])
        )
        lo, hi = RANGE[cur_type]
        if not lo <= act["in_zp"] <= hi:
            act["in_zp"] = _zp(rng, cur_type)
        out_type = cur_type
        if kind.startswith("qdq"):
            out_type = _pick(rng, ("int8", "uint8")) if rng.random() < 0.3 else cur_type
            act["f16"] = bool(opset >= 19 and rng.random() < 0.35)
            act["omit_zp"] = bool(rng.random() < 0.15)
            act["output_dtype"] = bool(opset >= 21 and act["omit_zp"] and rng.random() < 0.7)
            if act["omit_zp"] and not act["output_dtype"]:
                out_type = "uint8"  # QuantizeLinear without a zero point gives uint8
        typical = {"qdq_tanh": 1 / 128, "qdq_relu": 0.05}.get(kind, 1 / 256)
        act["out_type"] = out_type
        act["out_scale"] = _scale(rng, typical)
        act["out_zp"] = (
            0
            if act.get("omit_zp")
            else (
                RANGE[out_type][0]
                if kind in ("qlinear_sigmoid", "qdq_sigmoid") and rng.random() < 0.5
                else _zp(rng, out_type)
            )
        )
        if act.get("f16"):  # float16 scales: finite and non-zero in float16
            for k in ("in_scale", "out_scale"):
                act[k] = float(np.float16(min(max(act[k], 2.0**-24), 65504.0)))
        if kind == "qlinear_leakyrelu":
            act["alpha"] = float(np.float32(_pick(rng, (0.01, 0.1, 0.2, 0.5, 1.5))))
        acts.append(act)
        cur_type, cur_scale = out_type, act["out_scale"]
    spec["acts"] = acts
    _float_input(rng, spec)
    _island(rng, spec)
    return spec


def _island(rng: np.random.Generator, spec: Spec) -> None:
    """Sometimes a float host subgraph after the compute (before the activations)."""
    if rng.random() >= 0.25:
        return
    kind = _pick(rng, ISLANDS)
    n = spec["N"]
    spec["island"] = {
        "kind": kind,
        "out_scale": _scale(rng, 0.03),
        "gamma": [float(v) for v in rng.normal(size=n).astype(np.float32)],
        "beta": [float(v) for v in (rng.normal(size=n) * 0.3).astype(np.float32)],
        "w": [float(v) for v in (rng.normal(size=n * n * 3) * 0.3).astype(np.float32)],
    }


def _float_input(rng: np.random.Generator, spec: Spec) -> None:
    """Sometimes a float32 graph input quantized by a QuantizeLinear (at opset 21, maybe by
    `output_dtype` without a zero point)."""
    if rng.random() >= 0.15:
        return
    fi = {"output_dtype": bool(spec["opset"] >= 21 and rng.random() < 0.4)}
    if fi["output_dtype"]:
        spec["a_zp"] = 0  # no zero point input: it is 0
    spec["float_input"] = fi


def _requantize(rng: np.random.Generator, real: float, out_type: str) -> dict[str, Any]:
    """Requantize attributes for a real scale: fixed-point double/single rounding or float."""
    from prover.requant import quantize_multiplier

    real = min(max(real, 2.0**-40), 0.99)
    rounding = _pick(rng, ("double", "single", "float"), p=(0.5, 0.2, 0.3))
    rq: dict[str, Any] = {
        "rounding": rounding,
        "output_type": out_type,
        "zero_point": _zp(rng, out_type),
    }
    if rounding == "float":
        rq["scale"] = float(np.float32(real))
    else:
        m, s = quantize_multiplier(real)
        if rounding == "single" and s < -31:
            rq["rounding"] = "double"
        rq.update(multiplier=int(m), shift=int(s))
    return rq


def _c(name: str, value, dtype) -> onnx.TensorProto:
    return nh.from_array(np.asarray(value, dtype=dtype), name)


def build(spec: Spec) -> onnx.ModelProto:
    """The ONNX model of a spec (not checked: the frontend and ONNX Runtime judge it)."""
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    M, K, N = spec["M"], spec["K"], spec["N"]
    at = spec["a_type"]
    inputs = [oh.make_tensor_value_info("x", TPT[at], [M, K])]
    cur, cur_type, shape = "x", at, [M, K]
    fi = spec.get("float_input")
    if fi is not None:
        inputs = [oh.make_tensor_value_info("x_in", TP.FLOAT, [M, K])]
        inits.append(_c("q_s", spec["a_scale"], np.float32))
        if fi["output_dtype"]:
            q = oh.make_node("QuantizeLinear", ["x_in", "q_s"], ["x"], name="quant")
            q.attribute.append(oh.make_attribute("output_dtype", TPT[at]))
        else:
            inits.append(_c("q_z", spec["a_zp"], NP[at]))
            q = oh.make_node("QuantizeLinear", ["x_in", "q_s", "q_z"], ["x"], name="quant")
        nodes.append(q)
    compute = spec["compute"]
    if compute != "none":
        wt = spec["w_type"]
        per_col = spec["per_column"]
        ws = np.asarray(spec["w_scale"], np.float32)
        wz = np.asarray(spec["w_zp"], NP[wt])
        if per_col and wz.ndim == 0:
            wz = np.full(N, wz, NP[wt])
        inits += [
            _c("W", spec["w"], NP[wt]),
            _c("a_s", spec["a_scale"], np.float32),
            _c("a_z", spec["a_zp"], NP[at]),
            _c("w_s", ws, np.float32),
            _c("w_z", wz, NP[wt]),
        ]
        yt = spec["y_type"]
        inits += [_c("y_s", spec["y_scale"], np.float32), _c("y_z", spec["y_zp"], NP[yt])]
        shape = [M, N]
        if compute == "qlinear":
            ins = ["x", "a_s", "a_z", "W", "w_s", "w_z", "y_s", "y_z"]
            nodes.append(oh.make_node("QLinearMatMul", ins, ["mm_out"], name="mm"))
            cur_type = yt
        elif compute == "integer":
            nodes.append(
                oh.make_node("MatMulInteger", ["x", "W", "a_z", "w_z"], ["mm_out"], name="mm")
            )
            cur_type = "int32"
        else:
            axis = {"axis": 1} if per_col else {}
            nodes += [
                oh.make_node("DequantizeLinear", ["x", "a_s", "a_z"], ["x_f"], name="dq_x"),
                oh.make_node("DequantizeLinear", ["W", "w_s", "w_z"], ["w_f"], name="dq_w", **axis),
                oh.make_node(spec.get("qdq_op", "MatMul"), ["x_f", "w_f"], ["mm_f"], name="mm"),
                oh.make_node("QuantizeLinear", ["mm_f", "y_s", "y_z"], ["mm_out"], name="q_mm"),
            ]
            cur_type = yt
        cur = "mm_out"
        if spec.get("raw_int32"):
            return _model(
                spec, nodes, inputs, [oh.make_tensor_value_info(cur, TP.INT32, shape)], inits
            )
        rq = spec.get("requantize")
        if rq is not None:
            attrs = dict(rq)
            attrs.setdefault("multiplier", 0)
            attrs.setdefault("shift", 0)
            nodes.append(
                oh.make_node(
                    "Requantize", [cur], ["rq_out"], name="rq", domain=PROJECT_DOMAIN, **attrs
                )
            )
            cur, cur_type = "rq_out", rq["output_type"]
        if spec.get("reshape_unit"):
            inits.append(_c("unit_shape", [1, M, N], np.int64))
            nodes.append(oh.make_node("Reshape", [cur, "unit_shape"], ["reshaped"], name="reshape"))
            cur, shape = "reshaped", [1, M, N]
    if spec.get("clip") is not None:
        lo, hi = spec["clip"]
        inits += [_c("c_lo", lo, NP[cur_type]), _c("c_hi", hi, NP[cur_type])]
        nodes.append(oh.make_node("Clip", [cur, "c_lo", "c_hi"], ["clipped"], name="clip"))
        cur = "clipped"
    island = spec.get("island")
    if island is not None and cur_type in RANGE:
        in_scale = (
            spec.get("y_scale", spec["a_scale"]) if spec["compute"] != "none" else spec["a_scale"]
        )
        nodes += _island_nodes(
            island, cur, "island_out", cur_type, in_scale, shape, inits, spec["opset"]
        )
        cur = "island_out"
    acts = spec.get("acts", [])
    for i, act in enumerate(acts):
        name = f"act{i}"
        out = "y" if i == len(acts) - 1 else f"{name}_out"
        nodes += _activation(act, name, cur, out, cur_type, inits)
        cur, cur_type = out, act["out_type"]
    if cur != "y":  # the last node writes the graph output itself
        assert nodes[-1].output[0] == cur
        nodes[-1].output[0] = "y"
    outputs = [oh.make_tensor_value_info("y", TPT[cur_type], shape)]
    return _model(spec, nodes, inputs, outputs, inits)


def _island_nodes(island, inp, out, typ, in_scale, shape, inits, opset) -> list[onnx.NodeProto]:
    """DequantizeLinear -> the island's float ops -> QuantizeLinear (same type and zero 0)."""
    mk = oh.make_node
    n = shape[-1]
    f = np.float32
    inits += [
        _c("is_s", in_scale, f),
        _c("is_z", 0 if typ == "int8" else 128, NP[typ]),
        _c("is_os", island["out_scale"], f),
    ]
    nodes = [mk("DequantizeLinear", [inp, "is_s", "is_z"], ["is_f"], name="is_dq")]
    kind = island["kind"]
    if kind == "layernorm":
        # ReduceMean's axes: an attribute up to opset 17, an input from 18
        axes: dict[str, Any] = {} if opset >= 18 else {"axes": [-1]}
        mean_in = ["is_axes"] if opset >= 18 else []
        inits.append(_c("is_axes", [-1], np.int64))
        inits += [
            _c("is_two", 2.0, f),
            _c("is_eps", 1e-5, f),
            _c("is_g", island["gamma"], f),
            _c("is_b", island["beta"], f),
        ]
        nodes += [
            mk("ReduceMean", ["is_f", *mean_in], ["is_mu"], name="is_rm1", **axes),
            mk("Sub", ["is_f", "is_mu"], ["is_d"], name="is_sub"),
            mk("Pow", ["is_d", "is_two"], ["is_d2"], name="is_pow"),
            mk("ReduceMean", ["is_d2", *mean_in], ["is_var"], name="is_rm2", **axes),
            mk("Add", ["is_var", "is_eps"], ["is_ve"], name="is_add_eps"),
            mk("Sqrt", ["is_ve"], ["is_sd"], name="is_sqrt"),
            mk("Div", ["is_d", "is_sd"], ["is_n"], name="is_div"),
            mk("Mul", ["is_n", "is_g"], ["is_gn"], name="is_mul"),
            mk("Add", ["is_gn", "is_b"], ["is_y"], name="is_add"),
        ]
    elif kind == "gelu_erf":  # x * 0.5 * (1 + erf(x / sqrt(2)))
        inits += [_c("is_r2", math.sqrt(2.0), f), _c("is_one", 1.0, f), _c("is_half", 0.5, f)]
        nodes += [
            mk("Div", ["is_f", "is_r2"], ["is_a"], name="is_div"),
            mk("Erf", ["is_a"], ["is_e"], name="is_erf"),
            mk("Add", ["is_e", "is_one"], ["is_e1"], name="is_add"),
            mk("Mul", ["is_f", "is_e1"], ["is_m"], name="is_mul"),
            mk("Mul", ["is_m", "is_half"], ["is_y"], name="is_mul_half"),
        ]
    elif kind == "gelu_tanh":  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        inits += [
            _c("is_three", 3.0, f),
            _c("is_c", 0.044715, f),
            _c("is_k", math.sqrt(2.0 / math.pi), f),
            _c("is_one", 1.0, f),
            _c("is_half", 0.5, f),
        ]
        nodes += [
            mk("Pow", ["is_f", "is_three"], ["is_x3"], name="is_pow"),
            mk("Mul", ["is_x3", "is_c"], ["is_cx3"], name="is_mul_c"),
            mk("Add", ["is_f", "is_cx3"], ["is_in"], name="is_add_in"),
            mk("Mul", ["is_in", "is_k"], ["is_kin"], name="is_mul_k"),
            mk("Tanh", ["is_kin"], ["is_t"], name="is_tanh"),
            mk("Add", ["is_t", "is_one"], ["is_t1"], name="is_add_one"),
            mk("Mul", ["is_f", "is_half"], ["is_hx"], name="is_mul_half"),
            mk("Mul", ["is_hx", "is_t1"], ["is_y"], name="is_mul"),
        ]
    elif kind == "softmax":
        nodes.append(mk("Softmax", ["is_f"], ["is_y"], axis=-1, name="is_softmax"))
    elif kind == "matmul_float_w":
        w = np.asarray(island["w"][: n * n], f).reshape(n, n)
        inits.append(_c("is_w", w, f))
        nodes.append(mk("MatMul", ["is_f", "is_w"], ["is_y"], name="is_matmul"))
    else:  # a 1-D float Conv over the last axis, rows as channels
        rows = int(np.prod(shape[:-1]))
        w = np.resize(np.asarray(island["w"], f), rows * rows * 3).reshape(rows, rows, 3)
        inits += [
            _c("is_w", w, f),
            _c("is_s3", [1, rows, n], np.int64),
            _c("is_s2", list(shape), np.int64),
        ]
        nodes += [
            mk("Reshape", ["is_f", "is_s3"], ["is_f3"], name="is_reshape3"),
            mk("Conv", ["is_f3", "is_w"], ["is_c3"], pads=[1, 1], name="is_conv"),
            mk("Reshape", ["is_c3", "is_s2"], ["is_y"], name="is_reshape2"),
        ]
    nodes.append(mk("QuantizeLinear", ["is_y", "is_os", "is_z"], [out], name="is_q"))
    return nodes


def _activation(act, name, inp, out, in_type, inits) -> list[onnx.NodeProto]:
    kind = act["kind"]
    ot = act["out_type"]
    sdt = np.float16 if act.get("f16") else np.float32
    inits += [
        _c(f"{name}_is", act["in_scale"], sdt),
        _c(f"{name}_iz", act["in_zp"], NP[in_type]),
        _c(f"{name}_os", act["out_scale"], sdt),
    ]
    if kind.startswith("qlinear"):
        inits.append(_c(f"{name}_oz", act["out_zp"], NP[ot]))
        op_type = {"qlinear_sigmoid": "QLinearSigmoid", "qlinear_leakyrelu": "QLinearLeakyRelu"}[
            kind
        ]
        extra = {"alpha": act["alpha"]} if "alpha" in act else {}
        ins = [inp, f"{name}_is", f"{name}_iz", f"{name}_os", f"{name}_oz"]
        return [oh.make_node(op_type, ins, [out], name=name, domain=MS_DOMAIN, **extra)]
    op_type = {"qdq_sigmoid": "Sigmoid", "qdq_tanh": "Tanh", "qdq_relu": "Relu"}[kind]
    q_ins = [f"{name}_g", f"{name}_os"]
    q_attrs: dict[str, Any] = {}
    if act.get("omit_zp"):
        if act.get("output_dtype"):
            q_attrs["output_dtype"] = TPT[ot]
    else:
        inits.append(_c(f"{name}_oz", act["out_zp"], NP[ot]))
        q_ins.append(f"{name}_oz")
    return [
        oh.make_node(
            "DequantizeLinear", [inp, f"{name}_is", f"{name}_iz"], [f"{name}_f"], name=f"{name}_dq"
        ),
        oh.make_node(op_type, [f"{name}_f"], [f"{name}_g"], name=name),
        oh.make_node("QuantizeLinear", q_ins, [out], name=f"{name}_q", **q_attrs),
    ]


def _model(spec, nodes, inputs, outputs, inits) -> onnx.ModelProto:
    g = oh.make_graph(nodes, "fuzz", inputs, outputs, inits)
    opsets = [oh.make_opsetid("", spec["opset"]), oh.make_opsetid(MS_DOMAIN, 1)]
    if any(n.domain == PROJECT_DOMAIN for n in nodes):
        opsets.append(oh.make_opsetid(PROJECT_DOMAIN, 1))
    m = oh.make_model(g, opset_imports=opsets)
    m.ir_version = _ir_version(spec["opset"])
    return m


def uses_project_domain(model: onnx.ModelProto) -> bool:
    """True when the model has a node ONNX Runtime cannot run (the project's Requantize)."""
    return any(n.domain == PROJECT_DOMAIN for n in model.graph.node)
