"""Multiply-accumulate counts of a model's compute ops, and of what a compiled program runs where.

The compile report does not give MACs, so they are counted here: for an ONNX model from the
shapes ONNX Runtime computes (every tensor a compute op reads or writes is fetched in one
run with optimisations off, so run-time shapes such as those behind `Shape` ops are exact),
for a program from its NPU `MatMul` instructions and from the ONNX subgraphs of its host
steps. Conv, ConvInteger, QLinearConv, MatMul, MatMulInteger, QLinearMatMul, Gemm, QGemm,
the recurrent ops (LSTM, GRU, RNN, DynamicQuantizeLSTM), and ORT's fused forms that host
steps run (FusedConv, FusedMatMul, FusedGemm, DynamicQuantizeMatMul,
MatMulIntegerToFloat) count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import onnx
from onnx import helper

# op: (x, w) inputs; FusedConv and the MatMul forms below are ONNX Runtime's fusions
# (com.microsoft), which host ONNX steps run at ORT's default optimisation level
CONV = {"Conv": (0, 1), "ConvInteger": (0, 1), "QLinearConv": (0, 3), "FusedConv": (0, 1)}
MATMUL = {
    op: 0
    for op in (
        "MatMul",
        "MatMulInteger",
        "QLinearMatMul",
        "Gemm",
        "QGemm",
        "FusedMatMul",
        "FusedGemm",
        "DynamicQuantizeMatMul",
        "MatMulIntegerToFloat",
    )
}
RNN = {"LSTM": 4, "GRU": 3, "RNN": 1, "DynamicQuantizeLSTM": 4}  # op: gates
COMPUTE = set(CONV) | set(MATMUL) | set(RNN)


def _attr(node: onnx.NodeProto, name: str, default: object) -> object:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def node_macs(node: onnx.NodeProto, shape: dict[str, tuple[int, ...]]) -> int:
    """MACs of one compute node, from the shapes of its tensors (0 for other ops)."""
    op = node.op_type
    if op in CONV:
        xi, wi = CONV[op]
        w, y = shape[node.input[wi]], shape[node.output[0]]
        # every output element sums Cin/groups * prod(kernel) products (w: [M, Cin/g, k...])
        return math.prod(y) * math.prod(w[1:])
    if op in MATMUL:
        a = shape[node.input[0]]
        k = a[-1]
        if op in ("Gemm", "QGemm", "FusedGemm") and _attr(node, "transA", 0):
            k = a[0]
        return math.prod(shape[node.output[0]]) * k
    if op in RNN:
        x = shape[node.input[0]]  # [seq, batch, input] (layout 0, torch's export)
        w = shape[node.input[1]]  # [dirs, gates * hidden, input]; com.microsoft's transposed
        dirs, gh, inp = (w[0], w[2], w[1]) if op == "DynamicQuantizeLSTM" else w
        hidden = gh // RNN[op]
        seq, batch = (x[0], x[1]) if not _attr(node, "layout", 0) else (x[1], x[0])
        return seq * batch * dirs * gh * (inp + hidden)
    return 0


def valid_feeds(session) -> dict[str, np.ndarray]:
    """Valid inputs: zeros for integer inputs (token ids 0, masks 0), normal floats otherwise."""
    rng = np.random.default_rng(0)
    types = {
        "tensor(float)": np.float32,
        "tensor(int64)": np.int64,
        "tensor(int32)": np.int32,
        "tensor(uint8)": np.uint8,
        "tensor(int8)": np.int8,
        "tensor(bool)": np.bool_,
        "tensor(float16)": np.float16,
    }
    feeds = {}
    for i in session.get_inputs():
        shp = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        dt = types[i.type]
        if np.issubdtype(dt, np.floating):
            feeds[i.name] = rng.standard_normal(shp).astype(dt)
        elif "mask" in i.name:
            feeds[i.name] = np.ones(shp, dt)
        else:
            feeds[i.name] = np.zeros(shp, dt)
    return feeds


def tensor_shapes(model: onnx.ModelProto, names: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """Shapes of `names` (initializers, or values computed in one ORT run, optimisations off)."""
    import onnxruntime as ort

    init = {t.name: tuple(t.dims) for t in model.graph.initializer}
    for n in model.graph.node:  # Constant nodes
        if n.op_type == "Constant":
            t = _attr(n, "value", None)
            if isinstance(t, onnx.TensorProto):
                init[n.output[0]] = tuple(t.dims)
    wanted = [n for n in dict.fromkeys(names) if n not in init]
    out: dict[str, tuple[int, ...]] = {n: s for n, s in init.items()}
    if not wanted:
        return out
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    inputs = {i.name for i in m.graph.input}
    fetch = [n for n in wanted if n not in inputs]
    for n in fetch:
        if n not in have:
            m.graph.output.append(onnx.ValueInfoProto(name=n))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = valid_feeds(s)
    for n in wanted:
        if n in feeds:
            out[n] = tuple(feeds[n].shape)
    if fetch:
        for n, v in zip(fetch, s.run(fetch, feeds), strict=True):
            out[n] = tuple(np.asarray(v).shape)
    return out


def model_macs(model: onnx.ModelProto) -> tuple[int, dict[str, int]]:
    """(total MACs, MACs by op type) of a model's compute nodes (main graph)."""
    nodes = [n for n in model.graph.node if n.op_type in COMPUTE]
    names = [t for n in nodes for t in [*n.input[:4], n.output[0]] if t]
    shape = tensor_shapes(model, names)
    by_op: dict[str, int] = {}
    for n in nodes:
        by_op[n.op_type] = by_op.get(n.op_type, 0) + node_macs(n, shape)
    return sum(by_op.values()), by_op


def program_macs(program) -> tuple[int, int, list[str]]:
    """(NPU MACs, host MACs, opcodes not understood) of a compiled `npu_backend` program.

    NPU: every `MatMul` instruction, a [..., M, K] x [K, N] product (a tiled one computes
    only its columns `cols`); a conv over a window (`window`, `a` channels-last) computes
    one K_group-long product per output position and column (tiled: every row tile of its
    columns `cols`); a Pool-unit MatMul (a global average pool) is no model MAC. Host: the
    compute nodes inside every host ONNX subgraph.
    Any other instruction that is not data movement, a table/parameter load, an
    elementwise step or a host call is listed, so a share is never silently wrong.
    """
    npu = host = 0
    unknown: list[str] = []
    known = {"DmaIn", "DmaOut", "TableLoad", "ParamLoad", "Activation", "Requant", "Clip"}
    known |= {"Move", "MaxPool", "Concat"}  # data movement and max pools: no MACs
    for ins in program.instructions:
        kind = type(ins).__name__
        if kind == "MatMul" and getattr(ins, "unit", None) == "Pool":
            continue  # a pool's window sum on the Pool unit: no conv/matmul MAC of the model
        if kind == "MatMul":
            a = program.tensors[ins.a].shape if ins.a in program.tensors else None
            # a second operand computed at run time (attention's Q.K^T, P.V) is a tensor
            ws = program.tensors if getattr(ins, "w_input", False) else program.constants
            w = ws[ins.w].shape if ins.w in ws else None
            if a is None or w is None:
                unknown.append(f"MatMul {ins.name} (shapes not in the program)")
                continue
            n = (ins.cols[1] - ins.cols[0]) if ins.cols is not None else w[-1]
            window = getattr(ins, "window", None)
            if window is None:
                npu += math.prod(a[:-1]) * a[-1] * n
            else:  # a conv over a window, `a` channels-last: out positions x K_group x cols;
                # tiled, it streams every row tile of its columns (the simulator's
                # `_tiled_conv`), so it computes the same products
                npu += a[0] * math.prod(window.out_spatial(tuple(a[1:-1]))) * w[0] * n
        elif kind == "HostCall":
            step = ins.step
            if type(step).__name__ == "HostOnnx":
                sub = onnx.load_from_string(step.model)
                if any(n.op_type in COMPUTE for n in sub.graph.node):
                    host += model_macs(sub)[0]
        elif kind not in known:
            unknown.append(kind)
    return npu, host, unknown
