"""Targeted differential fuzzing of the forms `fuzz_gen` does not draw, on exhaustive inputs.

    python3 -m bench.fuzz_review --models 200 --seed 0 [--family NAME] [--reference onnx]

Each family builds a random model with a symbolic batch dimension and an input small
enough to enumerate (K <= 2 int8/uint8 elements per row, or one element per row for
the element-wise families), so every possible input row runs at once: a "proven"
verdict is then checked for *every* input of the model, not for samples. Families:

- `qgemm`: com.microsoft QGemm (bias C, alpha, transB, per-column b scale / zero point)
  -> [QLinearSigmoid | QLinearLeakyRelu];
- `binary`: QLinearMatMul -> QLinearAdd / QLinearMul with a per-column constant ->
  [QLinearSigmoid];
- `layout`: QLinearMatMul -> Transpose / Reshape -> [Clip] -> QLinearSigmoid;
- `conv`: pointwise QLinearConv with bias -> QLinearSigmoid (NCHW, H = W = 1);
- `qdq`: a float MatMul (+ bias Add) -> Sigmoid | Relu | Clip model quantized by
  `onnxruntime.quantization.quantize_static` (u8s8 / s8s8 / u8u8, per tensor or per
  channel, reduce_range), as users produce them;
- `qdq_wide`: opset-21 QDQ with int4/uint4/int16/uint16 activations and weights, block
  quantization, `saturate`: the frontend must reject them or keep them on the host.

Every model is compiled in process (`compiler.api.compile_model`, proof store off), its
program generated and run on all rows (`npu_backend.runner.run_batched`), and each graph
output compared with ONNX Runtime at the level the reference profile names. A
difference beyond the policy is a failure (`false_proof` when a proven site's nodes
produce it, else `mismatch`); an internal error is a `crash`. Exit 1 on any failure.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_gen import _zp  # noqa: E402 - the differential fuzzer's zero points, same draws

MS = "com.microsoft"
NP = {"int8": np.int8, "uint8": np.uint8, "int32": np.int32}
TPT = {"int8": TP.INT8, "uint8": TP.UINT8, "int32": TP.INT32, "float32": TP.FLOAT}
RANGE = {"int8": (-128, 127), "uint8": (0, 255)}
# (activation, weight) types ORT has QLinearMatMul / QGemm kernels for (output = activation)
FAILURES = ("crash", "false_proof", "mismatch", "wrong_counterexample")
PAIRS = (("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8"))


@dataclass
class Case:
    """One generated model and how to check it."""

    family: str
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    policy: str = "bitwise"
    target: str = "npu_float"
    note: str = ""


@dataclass
class Outcome:
    """What happened to one case."""

    case: Case
    status: str = (
        "ok"  # ok | rejected | crash | false_proof | mismatch | ort_rejects | wrong_counterexample
    )
    detail: str = ""
    verdicts: Counter = field(default_factory=Counter)
    npu_steps: int = 0


def _c(name: str, value: Any, dtype: Any) -> onnx.TensorProto:
    return nh.from_array(np.asarray(value, dtype=dtype), name)


def _scale(rng: np.random.Generator, typical: float) -> float:
    """A float32 scale near `typical`, sometimes a power of two (exact products: ties)."""
    if rng.random() < 0.3:
        return float(np.float32(2.0 ** round(np.log2(typical) + rng.integers(-2, 3))))
    return float(np.float32(typical * 10 ** rng.uniform(-0.8, 0.8)))


def all_rows(t: str, k: int) -> np.ndarray:
    """Every row of `k` elements of type `t` (256**k rows)."""
    lo, hi = RANGE[t]
    vals = np.arange(lo, hi + 1, dtype=np.int64)
    grid = np.stack(np.meshgrid(*([vals] * k), indexing="ij"), -1).reshape(-1, k)
    return grid.astype(t)


def _weights(rng: np.random.Generator, k: int, n: int, t: str) -> np.ndarray:
    lo, hi = RANGE[t]
    w = rng.integers(lo, hi + 1, size=(k, n))
    if rng.random() < 0.3:  # a column at an extreme: the largest accumulators
        w[:, int(rng.integers(0, n))] = hi if rng.random() < 0.5 else lo
    return w.astype(t)


def _model(nodes, inputs, outputs, inits, opset: int = 17) -> onnx.ModelProto:
    g = oh.make_graph(nodes, "review", inputs, outputs, inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", opset), oh.make_opsetid(MS, 1)])
    m.ir_version = 7 if opset <= 14 else 8 if opset <= 18 else 9 if opset <= 20 else 10
    return m


def _act(rng, name: str, inp: str, out: str, t: str, in_scale: float, in_zp: int, inits):
    """A com.microsoft QLinearSigmoid or QLinearLeakyRelu (or None: no activation)."""
    kind = rng.choice(["sigmoid", "leaky", "none"], p=[0.6, 0.2, 0.2])
    if kind == "none":
        return None
    os_ = _scale(rng, 1 / 256 if kind == "sigmoid" else in_scale)
    oz = RANGE[t][0] if kind == "sigmoid" and rng.random() < 0.5 else _zp(rng, t)
    inits += [
        _c(f"{name}_is", in_scale, np.float32),
        _c(f"{name}_iz", in_zp, NP[t]),
        _c(f"{name}_os", os_, np.float32),
        _c(f"{name}_oz", oz, NP[t]),
    ]
    ins = [inp, f"{name}_is", f"{name}_iz", f"{name}_os", f"{name}_oz"]
    if kind == "sigmoid":
        return oh.make_node("QLinearSigmoid", ins, [out], name=name, domain=MS)
    alpha = float(np.float32(rng.choice([0.01, 0.1, 0.2, 0.5, 1.5])))
    return oh.make_node("QLinearLeakyRelu", ins, [out], name=name, domain=MS, alpha=alpha)


def _end_with_act(rng, nodes: list, inp: str, t: str, in_scale: float, in_zp: int, inits) -> None:
    """Append a random activation of `inp` producing `y`, or (none drawn) rename the last
    node's output to `y`."""
    a = _act(rng, "act", inp, "y", t, in_scale, in_zp, inits)
    if a is None:
        nodes[-1].output[0] = "y"
    else:
        nodes.append(a)


def _policy_target(rng) -> tuple[str, str]:
    policy = str(rng.choice(["bitwise", "bounded:1"], p=[0.75, 0.25]))
    return policy, str(rng.choice(["npu_float", "npu_fixed"]))


class MatMulParams(NamedTuple):
    """Types, weights, scales and zero points of one quantized linear node."""

    at: str
    wt: str
    w: np.ndarray
    a_s: float
    a_z: int
    w_s: Any  # a float, or one per column
    w_z: Any  # an int, or one per column
    y_s: float
    y_z: int

    def inits(
        self, w: np.ndarray | None = None, names: tuple[str, str, str] = ("W", "w_s", "w_z")
    ) -> list[onnx.TensorProto]:
        """The weight (`w`: as the node takes it), its scale and zero point under `names`,
        and a_s, a_z, y_s, y_z, in the order of the node's inputs."""
        return [
            _c(names[0], self.w if w is None else w, NP[self.wt]),
            _c("a_s", self.a_s, np.float32),
            _c("a_z", self.a_z, NP[self.at]),
            _c(names[1], self.w_s, np.float32),
            _c(names[2], self.w_z, NP[self.wt]),
            _c("y_s", self.y_s, np.float32),
            _c("y_z", self.y_z, NP[self.at]),
        ]


MM_INPUTS = ["x", "a_s", "a_z", "W", "w_s", "w_z", "y_s", "y_z"]


def _qlinear_matmul(p: MatMulParams) -> tuple[list[onnx.TensorProto], list[onnx.NodeProto]]:
    """x -> QLinearMatMul `mm` (output `mm`) with its initializers."""
    return p.inits(), [oh.make_node("QLinearMatMul", MM_INPUTS, ["mm"], name="mm")]


def _matmul_params(rng, k: int, n: int) -> MatMulParams:
    at, wt = PAIRS[int(rng.integers(0, len(PAIRS)))]
    w = _weights(rng, k, n, wt)
    a_s = _scale(rng, 0.02)
    per_col = rng.random() < 0.5
    w_s = [_scale(rng, 0.01) for _ in range(n)] if per_col else _scale(rng, 0.01)
    w_z = [_zp(rng, wt) for _ in range(n)] if per_col and rng.random() < 0.5 else (
        0 if wt == "int8" else _zp(rng, wt))  # fmt: skip
    typ = a_s * float(np.mean(w_s)) * 128 * 64 * np.sqrt(k) / 64
    y_s = _scale(rng, typ)
    return MatMulParams(at, wt, w, a_s, _zp(rng, at), w_s, w_z, y_s, _zp(rng, at))


def gen_qgemm(rng: np.random.Generator) -> Case:
    """QGemm (bias, alpha, transB, per-column b) -> [activation]."""
    k, n = int(rng.integers(1, 3)), int(rng.integers(1, 5))
    p = _matmul_params(rng, k, n)
    if np.ndim(p.w_s) != np.ndim(p.w_z):  # QGemm: b's zero point shaped as its scale
        p = p._replace(
            w_z=list(np.broadcast_to(p.w_z, (n,))) if np.ndim(p.w_s) else int(np.ravel(p.w_z)[0])
        )
    at = p.at
    trans_b = bool(rng.random() < 0.5)
    alpha = float(np.float32(rng.choice([1.0, 1.0, 0.5, 2.0, 0.37, 1.7])))
    inits = p.inits(p.w.T if trans_b else p.w, ("B", "b_s", "b_z"))
    ins = ["x", "a_s", "a_z", "B", "b_s", "b_z", ""]
    if rng.random() < 0.7:
        c = rng.integers(-4000, 4001, size=(n,) if rng.random() < 0.7 else (1,))
        inits.append(_c("C", c, np.int32))
        ins[6] = "C"
    ins += ["y_s", "y_z"]
    attrs: dict[str, Any] = {}
    if trans_b:
        attrs["transB"] = 1
    if alpha != 1.0:
        attrs["alpha"] = alpha
    nodes = [oh.make_node("QGemm", ins, ["g"], name="gemm", domain=MS, **attrs)]
    _end_with_act(rng, nodes, "g", at, p.y_s, p.y_z, inits)
    x = oh.make_tensor_value_info("x", TPT[at], ["N", k])
    y = oh.make_tensor_value_info("y", TPT[at], ["N", n])
    policy, target = _policy_target(rng)
    m = _model(nodes, [x], [y], inits)
    return Case("qgemm", m, {"x": all_rows(at, k)}, policy, target)


def gen_binary(rng: np.random.Generator) -> Case:
    """QLinearMatMul -> QLinearAdd | QLinearMul (per-column constant) -> [activation]."""
    k, n = int(rng.integers(1, 3)), int(rng.integers(1, 5))
    p = _matmul_params(rng, k, n)
    at, y_s = p.at, p.y_s
    inits, nodes = _qlinear_matmul(p)
    op = str(rng.choice(["QLinearAdd", "QLinearMul"]))
    lo, hi = RANGE[at]
    cshape = [n] if rng.random() < 0.6 else ([1, n] if rng.random() < 0.5 else [1])
    cval = rng.integers(lo, hi + 1, size=cshape)
    b_s, c_s = _scale(rng, y_s), _scale(rng, y_s * (2 if op == "QLinearAdd" else 30))
    inits += [
        _c("k", cval, NP[at]),
        _c("b_s", b_s, np.float32),
        _c("b_z", _zp(rng, at), NP[at]),
        _c("c_s", c_s, np.float32),
        _c("c_z", _zp(rng, at), NP[at]),
    ]
    ins = ["mm", "y_s", "y_z", "k", "b_s", "b_z", "c_s", "c_z"]
    if rng.random() < 0.3:  # the constant first
        ins = ["k", "b_s", "b_z", "mm", "y_s", "y_z", "c_s", "c_z"]
    nodes.append(oh.make_node(op, ins, ["bin"], name="bin", domain=MS))
    _end_with_act(rng, nodes, "bin", at, c_s, int(_zp(rng, at)), inits)
    x = oh.make_tensor_value_info("x", TPT[at], ["N", k])
    y = oh.make_tensor_value_info("y", TPT[at], ["N", n])
    policy, target = _policy_target(rng)
    return Case("binary", _model(nodes, [x], [y], inits), {"x": all_rows(at, k)}, policy, target)


def gen_layout(rng: np.random.Generator) -> Case:
    """QLinearMatMul -> Reshape/Transpose -> [Clip] -> QLinearSigmoid (3-D input [N, R, K])."""
    k, n, r = int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 3))
    p = _matmul_params(rng, k, n)
    at, y_s, y_z = p.at, p.y_s, p.y_z
    inits, nodes = _qlinear_matmul(p)
    cur, shape = "mm", ["N", r, n]
    kind = str(rng.choice(["transpose", "reshape", "unit"]))
    if kind == "transpose":
        nodes.append(oh.make_node("Transpose", [cur], ["t"], name="t", perm=[0, 2, 1]))
        cur, shape = "t", ["N", n, r]
    elif kind == "reshape":
        inits.append(_c("shp", [-1, r * n], np.int64))
        nodes.append(oh.make_node("Reshape", [cur, "shp"], ["t"], name="t"))
        cur, shape = "t", ["N", r * n]
    else:
        inits.append(_c("axes", [1], np.int64))
        nodes.append(oh.make_node("Unsqueeze", [cur, "axes"], ["t"], name="t"))
        cur, shape = "t", ["N", 1, r, n]
    if rng.random() < 0.4:
        lo, hi = RANGE[at]
        a, b = sorted(int(v) for v in rng.integers(lo, hi + 1, size=2))
        inits += [_c("clo", a, NP[at]), _c("chi", b, NP[at])]
        nodes.append(oh.make_node("Clip", [cur, "clo", "chi"], ["cl"], name="clip"))
        cur = "cl"
    _end_with_act(rng, nodes, cur, at, y_s, y_z, inits)
    x = oh.make_tensor_value_info("x", TPT[at], ["N", r, k])
    y = oh.make_tensor_value_info("y", TPT[at], shape)
    rows = all_rows(at, k)
    feeds = {"x": np.repeat(rows[:, None, :], r, axis=1)}
    if r > 1:  # other rows differ: reverse order in the second
        feeds["x"][:, 1, :] = rows[::-1]
    policy, target = _policy_target(rng)
    return Case("layout", _model(nodes, [x], [y], inits), feeds, policy, target, kind)


def gen_conv(rng: np.random.Generator) -> Case:
    """Pointwise QLinearConv (bias, per-channel weights) -> [activation]; NCHW, H=W=1."""
    k, n = int(rng.integers(1, 3)), int(rng.integers(1, 5))
    p = _matmul_params(rng, k, n)
    if p.wt == "uint8":  # ORT's QLinearConv: u8s8, s8s8 (and u8u8 on some builds)
        p = p._replace(wt="int8", w=_weights(rng, k, n, "int8"), w_z=0)
    at = p.at
    inits = p.inits(p.w.T.reshape(n, k, 1, 1))
    ins = list(MM_INPUTS)
    if rng.random() < 0.7:
        inits.append(_c("Bc", rng.integers(-3000, 3001, size=n), np.int32))
        ins.append("Bc")
    nodes = [oh.make_node("QLinearConv", ins, ["cv"], name="conv")]
    _end_with_act(rng, nodes, "cv", at, p.y_s, p.y_z, inits)
    h, wd = (1, 1) if rng.random() < 0.5 else (int(rng.integers(1, 4)), int(rng.integers(2, 4)))
    x = oh.make_tensor_value_info("x", TPT[at], ["N", k, h, wd])
    y = oh.make_tensor_value_info("y", TPT[at], ["N", n, h, wd])
    policy, target = _policy_target(rng)
    rows = all_rows(at, k)  # every channel vector, spread over the batch and positions
    rows = np.concatenate([rows, rows[: (-len(rows)) % (h * wd)]])
    feeds = {"x": np.ascontiguousarray(rows.reshape(-1, h, wd, k).transpose(0, 3, 1, 2))}
    return Case("conv", _model(nodes, [x], [y], inits), feeds, policy, target)


QTYPES_8 = ("QUInt8", "QInt8")
WIDE_RANGE = {TP.INT4: (-8, 7), TP.UINT4: (0, 15)}
QTYPES_WIDE = ("QInt16", "QUInt16", "QInt4", "QUInt4")


class _Reader:
    """A calibration data reader over a list of feeds (onnxruntime.quantization's protocol)."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self.it = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.it, None)


def _float_model(rng: np.random.Generator, k: int, opset: int) -> onnx.ModelProto:
    """x[N, k] -> (MatMul -> [Add bias] -> activation) x 1..2 -> y, float32."""
    nodes, inits = [], []
    cur, width = "x", k
    for layer in range(int(rng.integers(1, 3))):
        n = int(rng.integers(1, 5))
        w = rng.normal(0, 1 / np.sqrt(width), size=(width, n)).astype(np.float32)
        inits.append(nh.from_array(w, f"W{layer}"))
        op = "Gemm" if rng.random() < 0.3 else "MatMul"
        if op == "Gemm":
            inits.append(nh.from_array(rng.normal(0, 0.3, n).astype(np.float32), f"b{layer}"))
            nodes.append(
                oh.make_node(
                    "Gemm", [cur, f"W{layer}", f"b{layer}"], [f"m{layer}"], name=f"mm{layer}"
                )
            )
        else:
            nodes.append(
                oh.make_node("MatMul", [cur, f"W{layer}"], [f"m{layer}"], name=f"mm{layer}")
            )
        cur = f"m{layer}"
        if op == "MatMul" and rng.random() < 0.6:
            inits.append(nh.from_array(rng.normal(0, 0.3, n).astype(np.float32), f"b{layer}"))
            nodes.append(oh.make_node("Add", [cur, f"b{layer}"], [f"a{layer}"], name=f"add{layer}"))
            cur = f"a{layer}"
        act = str(rng.choice(["Sigmoid", "Relu", "Tanh", "Clip", "none"]))
        if act == "Clip":
            inits += [
                nh.from_array(np.float32(0.0), f"clo{layer}"),
                nh.from_array(np.float32(6.0), f"chi{layer}"),
            ]
            nodes.append(
                oh.make_node("Clip", [cur, f"clo{layer}", f"chi{layer}"], [f"f{layer}"],
                             name=f"act{layer}")
            )  # fmt: skip
            cur = f"f{layer}"
        elif act != "none":
            nodes.append(oh.make_node(act, [cur], [f"f{layer}"], name=f"act{layer}"))
            cur = f"f{layer}"
        width = n
    nodes[-1].output[0] = "y"
    x = oh.make_tensor_value_info("x", TP.FLOAT, ["N", k])
    y = oh.make_tensor_value_info("y", TP.FLOAT, ["N", width])
    g = oh.make_graph(nodes, "float", [x], [y], inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = 8 if opset <= 18 else 9 if opset <= 20 else 10
    return m


def _input_grid(qm: onnx.ModelProto, k: int, limit: int = 4096) -> dict[str, np.ndarray]:
    """Float inputs hitting every quantized value of x (and the half steps, for k = 1)."""
    from onnx.helper import tensor_dtype_to_np_dtype

    protos = {i.name: i for i in qm.graph.initializer}
    q = next(n for n in qm.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    scale = np.float32(nh.to_array(protos[q.input[1]]).reshape(-1)[0])
    if len(q.input) > 2 and q.input[2]:
        zp_t = protos[q.input[2]].data_type
        zp = int(np.asarray(nh.to_array(protos[q.input[2]])).reshape(-1)[0].astype(np.int64))
    else:
        zp_t = next((a.i for a in q.attribute if a.name == "output_dtype"), TP.UINT8)
        zp = 0
    lo, hi = WIDE_RANGE.get(zp_t) or tuple(
        int(v) for v in (np.iinfo(tensor_dtype_to_np_dtype(zp_t)).min,
                         np.iinfo(tensor_dtype_to_np_dtype(zp_t)).max))  # fmt: skip
    lo, hi = max(lo, -32768), min(hi, 32767)
    vals = np.arange(lo, hi + 1, dtype=np.float64) - zp
    if k == 1:
        if vals.size > limit:  # 16-bit: every value near zero and the ends, a stride elsewhere
            mid = np.abs(vals) < limit // 4
            vals = np.unique(
                np.concatenate([vals[mid], vals[:64], vals[-64:], vals[:: vals.size // limit]])
            )
        vals = np.concatenate([vals, vals + 0.5, [vals[0] - 3, vals[-1] + 3]])
        rows = vals.reshape(-1, 1)
    else:
        step = max(1, int(np.ceil(vals.size / np.sqrt(limit))))
        v = vals[::step]
        rows = np.stack(np.meshgrid(*([v] * k), indexing="ij"), -1).reshape(-1, k)
    return {"x": (rows * np.float64(scale)).astype(np.float32)}


def _quantized(fm: onnx.ModelProto, quantize: Callable[..., Any], *args, **kw) -> onnx.ModelProto:
    """`fm` through an onnxruntime.quantization function (which reads and writes files)."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "f.onnx"), os.path.join(d, "q.onnx")
        onnx.save(fm, src)
        quantize(src, dst, *args, **kw)
        return onnx.load(dst)


def gen_qdq(rng: np.random.Generator, wide: bool = False) -> Case:
    """A float model quantized by onnxruntime.quantization.quantize_static (QDQ or QOperator)."""
    from onnxruntime import quantization as oq

    k = 1 if wide or rng.random() < 0.5 else 2
    opset = int(rng.choice([13, 17, 19, 21])) if not wide else 21
    fm = _float_model(rng, k, opset)
    types = QTYPES_WIDE if wide else QTYPES_8
    act_t = str(rng.choice(types))
    w_t = str(rng.choice(types if wide else ("QInt8", "QInt8", "QUInt8")))
    if act_t == "QInt8" and w_t == "QUInt8":  # quantize_static refuses s8u8
        w_t = "QInt8"
    fmt = "QDQ" if wide or rng.random() < 0.75 else "QOperator"
    per_channel = bool(rng.random() < 0.5)
    reduce_range = bool(rng.random() < 0.25)
    extra: dict[str, Any] = {}
    if rng.random() < 0.3:
        extra["ActivationSymmetric"] = True
    if rng.random() < 0.2:
        extra["WeightSymmetric"] = False
    calib = [{"x": rng.normal(0, 1.5, size=(8, k)).astype(np.float32)} for _ in range(4)]
    note = (
        f"{fmt} act {act_t} w {w_t} per_channel {per_channel} reduce_range {reduce_range} {extra}"
    )
    qm = _quantized(
        fm,
        oq.quantize_static,
        _Reader(calib),
        quant_format=getattr(oq.QuantFormat, fmt),
        per_channel=per_channel,
        reduce_range=reduce_range,
        activation_type=getattr(oq.QuantType, act_t),
        weight_type=getattr(oq.QuantType, w_t),
        extra_options=extra,
    )
    return Case("qdq_wide" if wide else "qdq", qm, _input_grid(qm, k), "bitwise",
                str(rng.choice(["npu_float", "npu_fixed"])), note)  # fmt: skip


def gen_qdq_act(rng: np.random.Generator) -> Case:
    """DequantizeLinear -> Sigmoid | Tanh | Relu -> QuantizeLinear chains, float32 or float16
    scales, opsets 13 to 23 (QuantizeLinear-23 divides in the scale's type)."""
    opset = int(rng.choice([13, 17, 19, 21, 22, 23]))
    t = str(rng.choice(["int8", "uint8"]))
    f16 = bool(opset >= 19 and rng.random() < 0.5)
    sdt = np.float16 if f16 else np.float32
    nodes, inits = [], []
    cur, cur_t = "x", t
    scale = _scale(rng, 0.05)
    for i in range(int(rng.integers(1, 3))):
        act = str(rng.choice(["Sigmoid", "Tanh", "Relu"]))
        out_t = cur_t if rng.random() < 0.7 else str(rng.choice(["int8", "uint8"]))
        typical = {"Sigmoid": 1 / 256, "Tanh": 1 / 128}.get(act, scale)
        os_ = _scale(rng, typical)
        if f16:
            scale, os_ = float(np.float16(scale)), float(np.float16(os_))
        inits += [
            _c(f"s{i}", scale, sdt),
            _c(f"z{i}", _zp(rng, cur_t), NP[cur_t]),
            _c(f"os{i}", os_, sdt),
        ]
        out = "y" if False else f"q{i}"
        q_in = [f"f{i}", f"os{i}"]
        q_attrs: dict[str, Any] = {}
        if opset >= 19 and rng.random() < 0.3:  # meaningful for float8 only
            q_attrs["saturate"] = int(rng.integers(0, 2))
        if opset >= 21 and rng.random() < 0.25:
            q_attrs["output_dtype"] = TPT[out_t]
        else:
            inits.append(_c(f"oz{i}", _zp(rng, out_t), NP[out_t]))
            q_in.append(f"oz{i}")
        nodes += [
            oh.make_node("DequantizeLinear", [cur, f"s{i}", f"z{i}"], [f"d{i}"], name=f"dq{i}"),
            oh.make_node(act, [f"d{i}"], [f"f{i}"], name=f"act{i}"),
            oh.make_node("QuantizeLinear", q_in, [out], name=f"q{i}", **q_attrs),
        ]
        cur, cur_t, scale = out, out_t, os_
    nodes[-1].output[0] = "y"
    x = oh.make_tensor_value_info("x", TPT[t], ["N", 1])
    y = oh.make_tensor_value_info("y", TPT[cur_t], ["N", 1])
    m = _model(nodes, [x], [y], inits, opset)
    del m.opset_import[1:]
    policy, target = _policy_target(rng)
    return Case("qdq_act", m, {"x": all_rows(t, 1)}, policy, target, f"opset {opset} f16 {f16}")


def gen_dynamic(rng: np.random.Generator) -> Case:
    """A float model quantized by onnxruntime.quantization.quantize_dynamic
    (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul ...), on float inputs."""
    from onnxruntime import quantization as oq

    k = int(rng.integers(1, 3))
    fm = _float_model(rng, k, int(rng.choice([13, 17, 21])))
    for vi in [*fm.graph.input, *fm.graph.output]:  # DynamicQuantizeLinear mixes rows
        vi.type.tensor_type.shape.dim[0].dim_value = 256
    qm = _quantized(
        fm,
        oq.quantize_dynamic,
        per_channel=bool(rng.random() < 0.5),
        weight_type=getattr(oq.QuantType, str(rng.choice(["QInt8", "QUInt8"]))),
    )
    x = rng.normal(0, 2, size=(256, k)).astype(np.float32)
    return Case("dynamic", qm, {"x": x}, "bitwise", str(rng.choice(["npu_float", "npu_fixed"])))


def gen_block(rng: np.random.Generator) -> Case:
    """Opset-21 blocked weights: x -> DQ -> MatMul(DQ(W, block_size)) -> Q -> [DQ -> Sigmoid
    -> Q], int8/uint8 or int4 weights, float32 scales per block of rows."""
    k = int(rng.choice([2, 4]))
    n = int(rng.integers(1, 4))
    block = int(rng.choice([1, 2]))
    wt = str(rng.choice(["int8", "int4"]))
    at = str(rng.choice(["int8", "uint8"]))
    lo, hi = (-8, 7) if wt == "int4" else RANGE["int8"]
    w = rng.integers(lo, hi + 1, size=(k, n))
    ws = np.asarray([[_scale(rng, 0.02) for _ in range(n)] for _ in range(k // block)], np.float32)
    wtp = TP.INT4 if wt == "int4" else TP.INT8
    inits = [
        oh.make_tensor("W", wtp, [k, n], w.reshape(-1).tolist()),
        _c("ws", ws, np.float32),
        oh.make_tensor("wz", wtp, list(ws.shape), [0] * ws.size),
        _c("xs", _scale(rng, 0.02), np.float32),
        _c("xz", _zp(rng, at), NP[at]),
        _c("ys", _scale(rng, 0.05), np.float32),
        _c("yz", _zp(rng, at), NP[at]),
    ]
    nodes = [
        oh.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"], name="dqx"),
        oh.make_node(
            "DequantizeLinear", ["W", "ws", "wz"], ["wf"], name="dqw", axis=0, block_size=block
        ),
        oh.make_node("MatMul", ["xf", "wf"], ["mf"], name="mm"),
        oh.make_node("QuantizeLinear", ["mf", "ys", "yz"], ["y"], name="qmm"),
    ]
    if rng.random() < 0.5:
        inits += [_c("os", 1 / 256, np.float32), _c("oz", RANGE[at][0], NP[at])]
        nodes[-1].output[0] = "q"
        nodes += [
            oh.make_node("DequantizeLinear", ["q", "ys", "yz"], ["d"], name="dq1"),
            oh.make_node("Sigmoid", ["d"], ["s"], name="act"),
            oh.make_node("QuantizeLinear", ["s", "os", "oz"], ["y"], name="q1"),
        ]
    x = oh.make_tensor_value_info("x", TPT[at], [256, 1] if k == 1 else ["N", k])
    y = oh.make_tensor_value_info("y", TPT[at], ["N", n])
    m = _model(nodes, [x], [y], inits, 21)
    del m.opset_import[1:]
    rows = all_rows(at, 2)[::16] if k == 2 else rng.integers(*RANGE[at], size=(4096, k)).astype(at)
    return Case(
        "block", m, {"x": np.ascontiguousarray(rows)}, "bitwise", "npu_float", f"{wt} block {block}"
    )


FAMILIES: dict[str, Callable[[np.random.Generator], Case]] = {
    "qgemm": gen_qgemm,
    "binary": gen_binary,
    "layout": gen_layout,
    "conv": gen_conv,
    "qdq": gen_qdq,
    "block": gen_block,
    "dynamic": gen_dynamic,
    "qdq_act": gen_qdq_act,
    "qdq_wide": lambda rng: gen_qdq(rng, wide=True),
}


def reference_outputs(case: Case, level: str) -> dict[str, np.ndarray]:
    """ONNX Runtime's graph outputs on the case's feeds at `level` ("off" | "default")."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if level == "default"
        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    sess = ort.InferenceSession(
        case.model.SerializeToString(), so, providers=["CPUExecutionProvider"]
    )
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, case.feeds), strict=True))


def check_case(
    case: Case, reference: str = "onnx", timeout_s: float = 5.0, **compile_kw: Any
) -> Outcome:
    """Compile, run every row on the simulator, compare the graph outputs with ORT.

    `compile_kw`: more `compile_model` keywords (compose_tables, schedule_strategy, ...).
    """
    from compiler.api import compile_model
    from compiler.cli.common import expected_errors, resolve_target
    from compiler.ort.reference_host import resolve_reference
    from npu_backend.codegen import generate
    from npu_backend.runner import run_batched
    from prover.policy import Policy

    out = Outcome(case)
    policy = Policy.parse(case.policy)
    profile = resolve_reference(reference)
    level = "default" if str(getattr(profile, "qdq_reading", "")) == "integer" else "off"
    try:
        ref = reference_outputs(case, level)
    except Exception as e:  # noqa: BLE001 - ORT has no kernel: nothing to compare with
        out.status, out.detail = "ort_rejects", str(e).splitlines()[0][:200]
        return out
    try:
        r = compile_model(
            case.model,
            policy,
            resolve_target(case.target),
            timeout_s=timeout_s,
            proofs_mode="off",
            reference=reference,
            **compile_kw,
        )
    except expected_errors() as e:
        out.status, out.detail = "rejected", str(e).splitlines()[0][:200]
        return out
    except Exception as e:  # noqa: BLE001 - an internal error is a finding
        out.status = "crash"
        out.detail = f"compile: {type(e).__name__}: {e}"[:300] + traceback.format_exc()[-600:]
        return out
    out.verdicts.update(str(s.verdict) for s in r.sites)
    try:
        program = generate(r.lowered, resolve_target(case.target))
        got, _ = run_batched(program, case.feeds)
    except Exception as e:  # noqa: BLE001
        out.status = "crash"
        out.detail = f"run: {type(e).__name__}: {e}"[:300] + traceback.format_exc()[-600:]
        return out
    out.npu_steps = sum(1 for s in r.lowered.steps if not type(s).__name__.startswith("Host"))
    proven = [s for s in r.sites if str(s.verdict).endswith("proven")]
    for s in r.sites:  # every refutation's recorded original output is ORT's on its input
        cx = s.counterexample if str(s.verdict).endswith("refuted") else None
        if cx is None or cx.inputs is None or not cx.expected:
            continue
        feeds = {k: np.asarray(v) for k, v in cx.inputs.items()}
        want = reference_outputs(Case(case.family, case.model, feeds), level)
        for name, v in cx.expected.items():
            if name in want and not np.array_equal(np.asarray(v), want[name]):
                out.status = "wrong_counterexample"
                out.detail = f"site {s.id} {s.nodes}: recorded {name} differs from ORT"
                return out
    for name, want in ref.items():
        a, b = np.asarray(got[name]), np.asarray(want)
        if a.shape != b.shape or a.dtype != b.dtype:
            out.status = "mismatch"
            out.detail = f"{name}: {a.dtype}{a.shape} vs ORT {b.dtype}{b.shape}"
            return out
        if a.dtype.kind == "f":  # a float output: bit for bit (bitwise policies only)
            d = (a.view(np.int32 if a.itemsize == 4 else np.int16) !=
                 b.view(np.int32 if b.itemsize == 4 else np.int16)).astype(np.int64) * (
                     policy.bound + 1)  # fmt: skip
        else:
            a, b = a.astype(np.int64), b.astype(np.int64)
            d = np.abs(a - b)
        if d.size and int(d.max()) > policy.bound:
            idx = np.unravel_index(int(d.argmax()), d.shape)
            row = {k: v[idx[0]].tolist() for k, v in case.feeds.items()}
            out.status = "false_proof" if proven else "mismatch"
            out.detail = (
                f"{name}{list(idx)}: npu {int(a[idx])} ORT {int(b[idx])} "
                f"({int((d > policy.bound).sum())} of {d.size} elements beyond {policy}); "
                f"row {row}; proven {[(s.id, s.nodes) for s in proven]}"
            )
            return out
    return out


def run(
    models: int,
    seed: int,
    families: list[str],
    reference: str = "onnx",
    log: Callable[[str], None] | None = None,
    keep: str | None = None,
    **compile_kw: Any,
) -> list[Outcome]:
    """Check `models` cases per family; `keep`: a directory to save failing models in."""
    outs = []
    for fam in families:
        for i in range(models):
            rng = np.random.default_rng([seed, i, sum(map(ord, fam))])
            case = FAMILIES[fam](rng)
            o = check_case(case, reference, **compile_kw)
            outs.append(o)
            if o.status in FAILURES and log:
                log(f"{fam} #{i} {o.status}: {o.detail}")
                if keep:
                    import os

                    os.makedirs(keep, exist_ok=True)
                    onnx.save(case.model, f"{keep}/{fam}_{seed}_{i}.onnx")
    return outs


def render(outs: list[Outcome]) -> str:
    """One row per family: models, statuses, verdicts."""
    lines = []
    by = itertools.groupby(sorted(outs, key=lambda o: o.case.family), key=lambda o: o.case.family)
    for fam, group in by:
        g = list(group)
        st = Counter(o.status for o in g)
        v: Counter = Counter()
        for o in g:
            v.update(o.verdicts)
        npu = sum(1 for o in g if o.npu_steps)
        lines.append(
            f"{fam:10s} models {len(g):4d}  with NPU steps {npu:4d}  {dict(st)}  {dict(v)}"
        )
        rej = Counter(o.detail for o in g if o.status in ("rejected", "ort_rejects"))
        lines += [f"    {n:3d} x {msg[:150]}" for msg, n in rej.most_common(4)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line; exit 1 when a case failed."""
    p = argparse.ArgumentParser(prog="fuzz_review", description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=50, help="models per family")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--family", action="append", choices=sorted(FAMILIES), default=[])
    p.add_argument("--reference", default="onnx")
    p.add_argument("--keep", default=None, help="save failing models in this directory")
    p.add_argument("--compose-tables", action="store_true", help="compile_model(compose_tables)")
    p.add_argument("--schedule-strategy", default=None, choices=["early", "alternatives", "late"])
    p.add_argument(
        "--schedule", default=None, choices=["plain", "grouped", "tiled"],
        help="the scheduling structure asked for every compute node",
    )  # fmt: skip
    args = p.parse_args(argv)
    kw: dict[str, Any] = {}
    if args.compose_tables:
        kw["compose_tables"] = True
    if args.schedule_strategy:
        kw["schedule_strategy"] = args.schedule_strategy
    if args.schedule:
        kw["schedule"] = {n: args.schedule for n in ("mm", "gemm", "conv", "mm0", "mm1")}
    t0 = time.perf_counter()
    outs = run(
        args.models,
        args.seed,
        args.family or sorted(FAMILIES),
        args.reference,
        log=lambda s: print(s, file=sys.stderr, flush=True),
        keep=args.keep,
        **kw,
    )
    print(render(outs))
    bad = [o for o in outs if o.status in FAILURES]
    print(f"{len(outs)} models in {time.perf_counter() - t0:.0f} s; failures {len(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
