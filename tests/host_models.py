"""Tiny reproducers of models ONNX Runtime runs that the frontend once refused (issue 24).

Each model has an NPU part the frontend reads (a QLinearMatMul on the uint8 input `q`) and
a part ONNX Runtime runs on the host: a type the NPU does not use (bool, int64, float16,
string), a shape computed at run time, control flow, a recurrent op, an unused opset import.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

Q_SHAPE = (2, 4)


def _npu_part() -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """`q -> QLinearMatMul(W) -> y`: the part the NPU runs (uint8 x uint8 -> uint8)."""
    w = (np.arange(12, dtype=np.int64).reshape(4, 3) * 7 % 256).astype(np.uint8)
    inits = [
        oh.make_tensor("q_s", TP.FLOAT, [], [0.05]),
        nh.from_array(np.array(3, np.uint8), "q_z"),
        nh.from_array(w, "W"),
        oh.make_tensor("w_s", TP.FLOAT, [], [0.02]),
        nh.from_array(np.array(5, np.uint8), "w_z"),
        oh.make_tensor("y_s", TP.FLOAT, [], [0.4]),
        nh.from_array(np.array(7, np.uint8), "y_z"),
    ]
    node = oh.make_node(
        "QLinearMatMul",
        ["q", "q_s", "q_z", "W", "w_s", "w_z", "y_s", "y_z"],
        ["y"],
        name="npu_mm",
    )
    return [node], inits


def finish(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    inits: list[onnx.TensorProto] = (),  # type: ignore[assignment]
    *,
    opset: int = 17,
    extra_opsets: tuple[tuple[str, int], ...] = (),
) -> onnx.ModelProto:
    """The host part plus the NPU part, checked by ONNX (IR version ORT loads)."""
    mm, mm_inits = _npu_part()
    g = oh.make_graph(
        [*nodes, *mm],
        "host_repro",
        [*inputs, oh.make_tensor_value_info("q", TP.UINT8, list(Q_SHAPE))],
        [*outputs, oh.make_tensor_value_info("y", TP.UINT8, [Q_SHAPE[0], 3])],
        [*inits, *mm_inits],
    )
    ops = [oh.make_opsetid("", opset), *(oh.make_opsetid(d, v) for d, v in extra_opsets)]
    m = oh.make_model(g, opset_imports=ops)
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def _f(name: str, shape: list[int], t: int = TP.FLOAT) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, t, shape)


def unused_training_opset() -> onnx.ModelProto:
    """An opset import nothing uses (`ai.onnx.training`, as `quant_pre_process` writes)."""
    nodes = [oh.make_node("Relu", ["x"], ["r"], name="relu")]
    return finish(
        nodes, [_f("x", [2, 3])], [_f("r", [2, 3])], extra_opsets=(("ai.onnx.training", 1),)
    )


def bool_cast() -> onnx.ModelProto:
    """A BOOL Cast between host ops (BERT's attention mask): Cast(x, BOOL) -> Not -> Cast."""
    nodes = [
        oh.make_node("Cast", ["x"], ["b"], to=TP.BOOL, name="to_bool"),
        oh.make_node("Not", ["b"], ["nb"], name="not"),
        oh.make_node("Cast", ["nb"], ["r"], to=TP.FLOAT, name="to_float"),
    ]
    return finish(nodes, [_f("x", [2, 3])], [_f("r", [2, 3])])


def bool_equal() -> onnx.ModelProto:
    """A BOOL Equal feeding Where (ViT's): `where(x == 0, 1, x)`."""
    inits = [
        nh.from_array(np.array(0.0, np.float32), "zero"),
        nh.from_array(np.array(1.0, np.float32), "one"),
    ]
    nodes = [
        oh.make_node("Equal", ["x", "zero"], ["e"], name="eq"),
        oh.make_node("Where", ["e", "one", "x"], ["r"], name="where"),
    ]
    return finish(nodes, [_f("x", [2, 3])], [_f("r", [2, 3])], inits)


def expand_to_shape() -> onnx.ModelProto:
    """Expand of a constant to `Shape(x)` (torch LSTM's initial state)."""
    inits = [nh.from_array(np.array([0.5], np.float32), "c")]
    nodes = [
        oh.make_node("Shape", ["x"], ["s"], name="shape"),
        oh.make_node("Expand", ["c", "s"], ["e"], name="expand"),
        oh.make_node("Add", ["x", "e"], ["r"], name="add"),
    ]
    return finish(nodes, [_f("x", [2, 3])], [_f("r", [2, 3])], inits)


def slice_to_shape() -> onnx.ModelProto:
    """Slice whose end is computed from `Shape(x)` (dim 1 minus one)."""
    inits = [
        nh.from_array(np.array([1], np.int64), "one"),
        nh.from_array(np.array([0], np.int64), "start"),
        nh.from_array(np.array([1], np.int64), "axis"),
    ]
    nodes = [
        oh.make_node("Shape", ["x"], ["s"], name="shape"),
        oh.make_node("Gather", ["s", "one"], ["d"], axis=0, name="dim1"),
        oh.make_node("Sub", ["d", "one"], ["end"], name="minus_one"),
        oh.make_node("Slice", ["x", "start", "end", "axis"], ["r"], name="slice"),
    ]
    return finish(nodes, [_f("x", [2, 3])], [_f("r", [2, 2])], inits)


def constant_of_shape_range() -> onnx.ModelProto:
    """ConstantOfShape(Shape(x)) plus Range(0, dim 1, 1) cast to float (position ids)."""
    inits = [
        nh.from_array(np.array(0, np.int64), "r0"),
        nh.from_array(np.array(1, np.int64), "r1"),
        nh.from_array(np.array(1, np.int64), "i1"),
    ]
    nodes = [
        oh.make_node("Shape", ["x"], ["s"], name="shape"),
        oh.make_node(
            "ConstantOfShape",
            ["s"],
            ["z"],
            value=nh.from_array(np.array([2.0], np.float32)),
            name="cos",
        ),
        oh.make_node("Gather", ["s", "i1"], ["n"], axis=0, name="dim1"),
        oh.make_node("Range", ["r0", "n", "r1"], ["pos"], name="range"),
        oh.make_node("Cast", ["pos"], ["posf"], to=TP.FLOAT, name="cast"),
        oh.make_node("Add", ["z", "posf"], ["r"], name="add"),
    ]
    return finish(nodes, [_f("x", [2, 3])], [_f("r", [2, 3])], inits)


def identity_weight() -> onnx.ModelProto:
    """Identity of an initializer used as a constant operand (ViT's bias), on both parts."""
    inits = [nh.from_array(np.array([0.25, -1.0, 2.0], np.float32), "bias")]
    nodes = [
        oh.make_node("Identity", ["bias"], ["b2"], name="bias_identity"),
        oh.make_node("Add", ["x", "b2"], ["r"], name="add"),
    ]
    m = finish(nodes, [_f("x", [2, 3])], [_f("r", [2, 3])], inits)
    # the NPU matmul reads its weight through an Identity too
    mm = next(n for n in m.graph.node if n.op_type == "QLinearMatMul")
    m.graph.node.insert(0, oh.make_node("Identity", ["W"], ["W_id"], name="w_identity"))
    mm.input[3] = "W_id"
    onnx.checker.check_model(m, full_check=True)
    return m


def gather_embedding() -> onnx.ModelProto:
    """Gather of a float table on int64 token ids (an embedding), ids a graph input."""
    table = (np.arange(40, dtype=np.float32).reshape(10, 4) / 8).astype(np.float32)
    nodes = [oh.make_node("Gather", ["table", "ids"], ["r"], axis=0, name="embed")]
    return finish(
        nodes, [_f("ids", [2, 5], TP.INT64)], [_f("r", [2, 5, 4])], [nh.from_array(table, "table")]
    )


def if_node() -> onnx.ModelProto:
    """If on a bool graph input; its branches read an outer-scope value."""
    one = nh.from_array(np.array(1.0, np.float32), "one")
    then_g = oh.make_graph(
        [oh.make_node("Add", ["x", "one"], ["t"])], "then", [], [_f("t", [2, 3])]
    )
    else_g = oh.make_graph([oh.make_node("Neg", ["x"], ["e"])], "else", [], [_f("e", [2, 3])])
    nodes = [oh.make_node("If", ["c"], ["r"], then_branch=then_g, else_branch=else_g, name="if")]
    return finish(nodes, [_f("c", [], TP.BOOL), _f("x", [2, 3])], [_f("r", [2, 3])], [one])


def loop_node() -> onnx.ModelProto:
    """Loop of 3 iterations adding an outer-scope value to a carried state."""
    body = oh.make_graph(
        [
            oh.make_node("Identity", ["cond_in"], ["cond_out"]),
            oh.make_node("Add", ["acc_in", "x"], ["acc_out"]),
        ],
        "body",
        [_f("i", [], TP.INT64), _f("cond_in", [], TP.BOOL), _f("acc_in", [2, 3])],
        [_f("cond_out", [], TP.BOOL), _f("acc_out", [2, 3])],
    )
    inits = [
        nh.from_array(np.array(3, np.int64), "trip"),
        nh.from_array(np.array(True), "cond"),
        nh.from_array(np.zeros((2, 3), np.float32), "acc0"),
    ]
    nodes = [oh.make_node("Loop", ["trip", "cond", "acc0"], ["r"], body=body, name="loop")]
    return finish(nodes, [_f("x", [2, 3])], [_f("r", [2, 3])], inits)


def scan_node() -> onnx.ModelProto:
    """Scan: a running sum over the rows of x."""
    body = oh.make_graph(
        [
            oh.make_node("Add", ["s_in", "row"], ["s_out"]),
            oh.make_node("Identity", ["s_out"], ["row_out"]),
        ],
        "body",
        [_f("s_in", [3]), _f("row", [3])],
        [_f("s_out", [3]), _f("row_out", [3])],
    )
    inits = [nh.from_array(np.zeros(3, np.float32), "s0")]
    nodes = [
        oh.make_node("Scan", ["s0", "x"], ["s", "r"], body=body, num_scan_inputs=1, name="scan")
    ]
    return finish(nodes, [_f("x", [2, 3])], [_f("r", [2, 3])], inits)


def _rnn(op: str, gates: int) -> onnx.ModelProto:
    hidden, feat, seq = 3, 2, 4
    rng = np.random.default_rng(7)
    w = rng.standard_normal((1, gates * hidden, feat)).astype(np.float32)
    r = rng.standard_normal((1, gates * hidden, hidden)).astype(np.float32)
    b = rng.standard_normal((1, 2 * gates * hidden)).astype(np.float32)
    inits = [nh.from_array(w, "rw"), nh.from_array(r, "rr"), nh.from_array(b, "rb")]
    node = oh.make_node(
        op, ["x", "rw", "rr", "rb"], ["all", "h"], hidden_size=hidden, name=op.lower()
    )
    return finish(
        [node],
        [_f("x", [seq, 1, feat])],
        [_f("all", [seq, 1, 1, hidden]), _f("h", [1, 1, hidden])],
        inits,
    )


def lstm() -> onnx.ModelProto:
    return _rnn("LSTM", 4)


def gru() -> onnx.ModelProto:
    return _rnn("GRU", 3)


def rnn() -> onnx.ModelProto:
    return _rnn("RNN", 1)


def lstm_state_from_shape() -> onnx.ModelProto:
    """torch `nn.LSTM`'s export: the initial state is Expand(0, [1, Shape(x)[1], hidden]),
    its size computed from Shape -> Gather -> Unsqueeze -> Concat at run time."""
    m = _rnn("LSTM", 4)
    g = m.graph
    lstm = next(n for n in g.node if n.op_type == "LSTM")
    g.initializer.extend(
        [
            nh.from_array(np.array(1, np.int64), "batch_axis"),
            nh.from_array(np.array([1], np.int64), "dirs"),
            nh.from_array(np.array([3], np.int64), "hid"),
            nh.from_array(np.array([0.0], np.float32), "zero"),
            nh.from_array(np.array([0], np.int64), "ax0"),
        ]
    )
    pre = [
        oh.make_node("Shape", ["x"], ["xs"], name="x_shape"),
        oh.make_node("Gather", ["xs", "batch_axis"], ["b"], axis=0, name="batch"),
        oh.make_node("Unsqueeze", ["b", "ax0"], ["b1"], name="batch_1d"),
        oh.make_node("Concat", ["dirs", "b1", "hid"], ["state_shape"], axis=0, name="cat"),
        oh.make_node("Expand", ["zero", "state_shape"], ["h0"], name="h0"),
        oh.make_node("Expand", ["zero", "state_shape"], ["c0"], name="c0"),
    ]
    lstm.input.extend(["", "h0", "c0"])
    for k, n in enumerate(pre):
        g.node.insert(k, n)
    onnx.checker.check_model(m, full_check=True)
    return m


def nonzero_run_time_shape() -> onnx.ModelProto:
    """A shape only the values decide: NonZero(x > 0) -> GatherND -> ReduceSum, a scalar
    (static again): the three run on the host as one node."""
    inits = [nh.from_array(np.array(0.0, np.float32), "zero")]
    nodes = [
        oh.make_node("Greater", ["x", "zero"], ["pos"], name="positive"),
        oh.make_node("NonZero", ["pos"], ["nz"], name="nonzero"),
        oh.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0], name="idx"),
        oh.make_node("GatherND", ["x", "idx"], ["vals"], name="gather"),
        oh.make_node("ReduceSum", ["vals"], ["r"], keepdims=0, name="sum"),
    ]
    return finish(nodes, [_f("x", [2, 3])], [_f("r", [])], inits)


def reshape_to_concat_shape() -> onnx.ModelProto:
    """Reshape to Concat(Shape(x)[:1], [-1]) (BERT's attention mask): ORT folds the shape."""
    inits = [
        nh.from_array(np.array([0], np.int64), "zero"),
        nh.from_array(np.array([-1], np.int64), "minus_one"),
    ]
    nodes = [
        oh.make_node("Shape", ["x"], ["s"], name="shape"),
        oh.make_node("Gather", ["s", "zero"], ["d0"], axis=0, name="dim0"),
        oh.make_node("Concat", ["d0", "minus_one"], ["to"], axis=0, name="concat"),
        oh.make_node("Reshape", ["x", "to"], ["r"], name="reshape"),
    ]
    return finish(nodes, [_f("x", [2, 3, 2])], [_f("r", [2, 6])], inits)


def reshape_to_fed_shape() -> onnx.ModelProto:
    """Reshape to a shape fed at run time, then ReduceSum to a scalar (static again): the
    two run on the host as one node. Its feed `s` must be a shape of 6 elements."""
    nodes = [
        oh.make_node("Reshape", ["x", "s"], ["xr"], name="reshape"),
        oh.make_node("ReduceSum", ["xr"], ["r"], keepdims=0, name="sum"),
    ]
    return finish(nodes, [_f("x", [2, 3]), _f("s", [2], TP.INT64)], [_f("r", [])])


def layout_of_constants() -> onnx.ModelProto:
    """A bias reshaped and a table transposed before a float Add (ViT's Conv bias after
    dynamic quantization): ORT folds both, they are constants."""
    inits = [
        nh.from_array(np.array([0.5, -1.0, 2.0], np.float32), "bias"),
        nh.from_array(np.array([1, 3], np.int64), "to"),
        nh.from_array(np.arange(6, dtype=np.float32).reshape(3, 2), "table"),
    ]
    nodes = [
        oh.make_node("Reshape", ["bias", "to"], ["b2"], name="bias_reshape"),
        oh.make_node("Transpose", ["table"], ["t2"], perm=[1, 0], name="table_t"),
        oh.make_node("Add", ["x", "b2"], ["xb"], name="add_bias"),
        oh.make_node("Add", ["xb", "t2"], ["r"], name="add_table"),
    ]
    return finish(nodes, [_f("x", [2, 3])], [_f("r", [2, 3])], inits)


def expand_to_where_shape() -> onnx.ModelProto:
    """torch's Expand to `where(shape == -1, 1, shape)` of a constant shape (BERT's token
    type ids): the bool mask is folded too, so the Expand's shape is static."""
    inits = [
        nh.from_array(np.array([2, -1], np.int64), "want"),
        nh.from_array(np.array(-1, np.int64), "minus_one"),
        nh.from_array(np.array([1, 1], np.int64), "ones"),
        nh.from_array(np.array([[0.5, 1.5, 2.5]], np.float32), "row"),
    ]
    nodes = [
        oh.make_node("Equal", ["want", "minus_one"], ["is_free"], name="is_free"),
        oh.make_node("Where", ["is_free", "ones", "want"], ["to"], name="where"),
        oh.make_node("Expand", ["row", "to"], ["e"], name="expand"),
        oh.make_node("Add", ["x", "e"], ["r"], name="add"),
    ]
    return finish(nodes, [_f("x", [2, 3])], [_f("r", [2, 3])], inits)


def two_run_time_shapes() -> onnx.ModelProto:
    """Two independent values whose shapes follow the data (NonZero of x > 0 and of x < 0),
    each made static by its own ReduceSum: two host groups, neither lost."""
    inits = [nh.from_array(np.array(0.0, np.float32), "zero")]
    nodes = [
        oh.make_node("Greater", ["x", "zero"], ["pos"], name="positive"),
        oh.make_node("Less", ["x", "zero"], ["neg"], name="negative"),
        oh.make_node("NonZero", ["pos"], ["nz_pos"], name="nonzero_pos"),
        oh.make_node("NonZero", ["neg"], ["nz_neg"], name="nonzero_neg"),
        oh.make_node("ReduceSum", ["nz_pos"], ["r_pos"], keepdims=0, name="sum_pos"),
        oh.make_node("ReduceSum", ["nz_neg"], ["r_neg"], keepdims=0, name="sum_neg"),
    ]
    out = [_f("r_pos", [], TP.INT64), _f("r_neg", [], TP.INT64)]
    return finish(nodes, [_f("x", [2, 3])], out, inits)


def float16_between_host_ops() -> onnx.ModelProto:
    """float16 tensors between host ops: Cast to FLOAT16 -> Mul -> Cast back."""
    inits = [nh.from_array(np.array(1.5, np.float16), "h")]
    nodes = [
        oh.make_node("Cast", ["x"], ["xh"], to=TP.FLOAT16, name="to_half"),
        oh.make_node("Mul", ["xh", "h"], ["mh"], name="mul_half"),
        oh.make_node("Cast", ["mh"], ["r"], to=TP.FLOAT, name="to_float"),
    ]
    return finish(nodes, [_f("x", [2, 3])], [_f("r", [2, 3]), _f("mh", [2, 3], TP.FLOAT16)], inits)


def int64_between_host_ops() -> onnx.ModelProto:
    """int64 arithmetic on the host: Cast to INT64 -> Mul -> ReduceSum -> int64 output."""
    inits = [nh.from_array(np.array(3, np.int64), "k")]
    nodes = [
        oh.make_node("Cast", ["x"], ["xi"], to=TP.INT64, name="to_int64"),
        oh.make_node("Mul", ["xi", "k"], ["m"], name="mul_int64"),
        oh.make_node("ReduceSum", ["m"], ["r"], keepdims=0, name="sum"),
    ]
    return finish(nodes, [_f("x", [2, 3])], [_f("r", [], TP.INT64)], inits)


def string_between_host_ops() -> onnx.ModelProto:
    """string tensors between host ops: Cast float -> STRING -> FLOAT."""
    nodes = [
        oh.make_node("Cast", ["x"], ["s"], to=TP.STRING, name="to_string"),
        oh.make_node("Cast", ["s"], ["r"], to=TP.FLOAT, name="to_float"),
    ]
    return finish(nodes, [_f("x", [2, 3])], [_f("r", [2, 3])])


def bool_input() -> onnx.ModelProto:
    """A bool graph input (an attention mask) into Where."""
    inits = [nh.from_array(np.array(-1.0, np.float32), "neg")]
    nodes = [oh.make_node("Where", ["m", "x", "neg"], ["r"], name="where")]
    return finish(nodes, [_f("m", [2, 3], TP.BOOL), _f("x", [2, 3])], [_f("r", [2, 3])], inits)


REPRODUCERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "unused_training_opset": unused_training_opset,
    "bool_cast": bool_cast,
    "bool_equal": bool_equal,
    "expand_to_shape": expand_to_shape,
    "slice_to_shape": slice_to_shape,
    "constant_of_shape_range": constant_of_shape_range,
    "identity_weight": identity_weight,
    "gather_embedding": gather_embedding,
    "if": if_node,
    "loop": loop_node,
    "scan": scan_node,
    "lstm": lstm,
    "gru": gru,
    "rnn": rnn,
    "lstm_state_from_shape": lstm_state_from_shape,
    "nonzero": nonzero_run_time_shape,
    "reshape_to_concat_shape": reshape_to_concat_shape,
    "expand_to_where_shape": expand_to_where_shape,
    "layout_of_constants": layout_of_constants,
    "two_run_time_shapes": two_run_time_shapes,
    "float16": float16_between_host_ops,
    "int64": int64_between_host_ops,
    "string": string_between_host_ops,
    "bool_input": bool_input,
}


def feeds(m: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs in each input's legal range: ids in [0, rows of the table), bools, floats."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for vi in m.graph.input:
        tt = vi.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        if tt.elem_type == TP.INT64:
            out[vi.name] = rng.integers(0, 10, shape).astype(np.int64)
        elif tt.elem_type == TP.BOOL:
            out[vi.name] = rng.integers(0, 2, shape).astype(bool)
        elif tt.elem_type == TP.UINT8:
            out[vi.name] = rng.integers(0, 256, shape).astype(np.uint8)
        else:
            x = rng.standard_normal(shape).astype(np.float32) * 4
            x.reshape(-1)[:1] = 0.0  # Equal's true case
            out[vi.name] = x
    return out
