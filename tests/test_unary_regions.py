"""Unary regions (issue 23): one table per elementwise region of one quantized value.

Each region after a QLinearMatMul and after a 1x1 QLinearConv is proposed and proven on
npu_float, and the compiled program equals ONNX Runtime's default session bit for bit;
each boundary is refused with its reason; the position-independence check that makes a
table taken from ORT a proof fails on a region whose elements depend on each other.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from call_counter import count_calls
from models import const, make, random_inputs, weights
from onnx import TensorProto as TP
from onnx import helper as oh
from region_models import conv_region, matmul_region, qdq_conv_region, region

from compiler.api import compile_model
from compiler.errors import InternalError
from compiler.frontend.ops import unary_region
from compiler.ir.semantics import run_graph
from compiler.ort import per_element as pe
from compiler.ort.region_table import RegionError, region_model, region_table
from compiler.ort.tables import session
from npu_backend import codegen, simulator
from npu_backend.target import load_target
from prover.verdict import ReasonCode

FLOAT = load_target("npu_backend/targets/npu_float.toml")

# region kind -> the function its table is (a named one the toolchain builds, or "table":
# the postprocessor loads ORT's table)
KINDS = {
    "hardsigmoid": "hardsigmoid",
    "hardswish": "hardswish",
    "silu": "silu",
    "gelu_erf": "gelu",
    "gelu_tanh": "gelu_tanh",
    "leakyrelu": "leakyrelu",
    "chain": "table",
    "silu_qdq": "table",
    "qlinear_silu": "table",
}


def _equal_ort_default(m: onnx.ModelProto, r, seeds=(0, 1)) -> None:
    prog = codegen.generate(r.lowered, FLOAT)
    for seed in seeds:
        inp = random_inputs(m, seed)
        ref = session(m, "default").run(None, inp)[0]
        np.testing.assert_array_equal(ref, run_graph(r.original, inp)["y"])
        np.testing.assert_array_equal(ref, simulator.run(prog, inp)[0]["y"])


@pytest.mark.parametrize("build", [matmul_region, conv_region], ids=["matmul", "conv1x1"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_region_after_compute_is_proposed_proven_and_equals_ort(kind, build):
    m = build(kind)
    r = compile_model(m, "bitwise", FLOAT)
    (site,) = r.sites
    compute = "matmul" if build is matmul_region else "conv"
    assert site.pattern.split("+")[0] == compute
    assert site.activation.op == "lut" and site.activation.attrs["source"] in ("region", "qlinear")
    assert site.verdict == "proven", (site.pattern, site.reason)
    assert [n.op for n in r.graph.nodes] == ["fused"]
    _equal_ort_default(m, r)


@pytest.mark.parametrize(
    "window", [dict(kernel=3), dict(kernel=3, group=8, C_out=8)], ids=["3x3", "depthwise3x3"]
)
@pytest.mark.parametrize(
    "kind",
    [
        "hardswish",
        "silu",
        pytest.param("qlinear_silu", marks=pytest.mark.slow),
        pytest.param("gelu_erf", marks=pytest.mark.slow),
    ],
)
def test_region_after_a_window_conv_is_proven_and_equals_ort(kind, window):
    """The MobileNet/EfficientNet shapes: a 3x3 or depthwise conv, then HardSwish/SiLU/GELU
    (issues 22 and 23 together): one fused conv with the region's table, as ORT computes."""
    m = conv_region(kind, H=5, W=5, **window)
    r = compile_model(m, "bitwise", FLOAT)
    (site,) = r.sites
    assert site.pattern.split("+")[0] == "conv" and site.verdict == "proven", site.reason
    assert [n.op for n in r.graph.nodes] == ["fused"]
    _equal_ort_default(m, r)


@pytest.mark.parametrize("kind", ["hardswish", "silu", "gelu_erf", "silu_qdq"])
def test_region_after_a_qdq_conv_is_proven_and_equals_ort(kind):
    """The zoo's form: a QDQ 1x1 conv (a QLinearConv in the graph ORT's default session
    runs) and a float island after it, uint8 activations."""
    m = qdq_conv_region(kind)
    r = compile_model(m, "bitwise", FLOAT)
    (site,) = r.sites
    assert site.pattern.startswith("conv+") and site.verdict == "proven", site.reason
    _equal_ort_default(m, r)


def test_region_function_names():
    for kind, function in KINDS.items():
        r = compile_model(matmul_region(kind), "bitwise", FLOAT)
        assert r.sites[0].activation.attrs["function"] == function, kind


def test_silu_after_1x1_conv_is_not_multiple_users():
    """Both users of the conv output (Sigmoid and Mul) are inside the region."""
    r = compile_model(conv_region("silu"), "bitwise", FLOAT)
    (site,) = r.sites
    assert site.verdict == "proven" and site.pattern == "conv+silu"
    assert site.nodes == ["conv", "dq", "sig", "mul", "q"]


def test_user_outside_the_region_is_multiple_users():
    # a value inside the region (the requantized sigmoid) is also a graph output
    r = compile_model(matmul_region("qlinear_silu", extra="output"), "bitwise", FLOAT)
    (site,) = r.sites
    assert site.verdict == "rejected" and site.reason.code == ReasonCode.MULTIPLE_USERS
    assert "'sq'" in site.reason.message and "graph output" in site.reason.message
    # the compute result itself used outside the region: the seed's rule
    m = matmul_region("silu")
    m.graph.output.append(oh.make_tensor_value_info("u", TP.INT8, [2, 8]))
    (site,) = compile_model(m, "bitwise", FLOAT).sites
    assert site.verdict == "rejected" and site.reason.code == ReasonCode.MULTIPLE_USERS
    assert "'u'" in site.reason.message


def test_second_non_constant_input_is_refused():
    r = compile_model(matmul_region("second_input"), "bitwise", FLOAT)
    (site,) = r.sites
    assert site.verdict == "rejected" and site.reason.code == ReasonCode.REGION_SECOND_INPUT
    assert "'mul'" in site.reason.message and "'o'" in site.reason.message
    assert site.pattern == "matmul+region"
    assert "fused" not in [n.op for n in r.graph.nodes]


def test_constant_of_several_values_is_a_second_input():
    m = matmul_region("hardswish")
    # per-column constant: the result is a function of the code and the column
    dq = next(n for n in m.graph.node if n.name == "dq")
    dq.output[0] = "f0"
    m.graph.initializer.append(const("percol", np.linspace(0.5, 1.5, 8), "float32"))
    m.graph.node.insert(2, oh.make_node("Mul", ["f0", "percol"], ["f"], name="scale_cols"))
    r = compile_model(m, "bitwise", FLOAT)
    (site,) = r.sites
    assert site.reason.code == ReasonCode.REGION_SECOND_INPUT
    assert "a constant of 8 values" in site.reason.message


def test_reduction_inside_is_refused():
    r = compile_model(conv_region("reducemean"), "bitwise", FLOAT)
    (site,) = r.sites
    assert site.verdict == "rejected" and site.reason.code == ReasonCode.REGION_REDUCTION
    assert "'mean' (ReduceMean)" in site.reason.message


def test_region_whose_float_value_leaves_it_is_cut_back_to_nothing():
    """The sigmoid's float output also feeds a ReduceMean: the region cannot keep the
    Sigmoid, so not the QuantizeLinear after it either (no member reads a value that is not
    computed inside); the reduction is the reason."""
    r = compile_model(conv_region("sigmoid_used_outside"), "bitwise", FLOAT)
    (site,) = r.sites
    assert site.reason.code == ReasonCode.REGION_REDUCTION
    assert "'mean' (ReduceMean)" in site.reason.message


def test_already_fused_producer_is_refused():
    """A region whose input is another table's output: the producer already carries the
    first table (two tables compose only as a proven rewrite, compose_tables)."""
    m = matmul_region("hardswish")
    q = next(n for n in m.graph.node if n.name == "q")
    q.output[0] = "y1"
    m.graph.initializer.extend([const("lo", -100, "int8"), const("hi", 100, "int8")])
    m.graph.node.append(oh.make_node("Clip", ["y1", "lo", "hi"], ["y2"], name="clip"))
    nodes, consts = region("hardsigmoid", u="y2", y="y")
    for n in nodes:
        n.name = "second_" + n.name
        n.input[:] = [{"f": "f2", "g": "g2"}.get(i, i) for i in n.input]
        n.output[:] = [{"f": "f2", "g": "g2"}.get(o, o) for o in n.output]
    m.graph.node.extend(nodes)
    r = compile_model(m, "bitwise", FLOAT)
    first, second = r.sites
    assert first.verdict == "proven" and first.pattern == "matmul+hardswish"
    assert second.verdict == "rejected" and second.reason.code == ReasonCode.ALREADY_FUSED


def _int16_model() -> onnx.ModelProto:
    """DQ -> MatMul -> Q(int16) 'mm_q' -> DQ -> HardSwish -> Q(int8): 16-bit codes."""
    inits = [
        const("W", weights(16, 8, 0), "int8"),
        const("x_s", 0.02, "float32"),
        const("x_z", 0, "int8"),
        const("w_s", 0.01, "float32"),
        const("w_z", 0, "int8"),
        const("u_s", 0.001, "float32"),
        oh.make_tensor("u_z", TP.INT16, [], [0]),
        const("y_s", 1 / 64, "float32"),
        const("y_z", 0, "int8"),
    ]
    nodes = [
        oh.make_node("DequantizeLinear", ["x", "x_s", "x_z"], ["xf"], name="x_dq"),
        oh.make_node("DequantizeLinear", ["W", "w_s", "w_z"], ["wf"], name="w_dq"),
        oh.make_node("MatMul", ["xf", "wf"], ["mf"], name="mm"),
        oh.make_node("QuantizeLinear", ["mf", "u_s", "u_z"], ["u"], name="mm_q"),
        oh.make_node("DequantizeLinear", ["u", "u_s", "u_z"], ["f"], name="dq"),
        oh.make_node("HardSwish", ["f"], ["g"], name="hsw"),
        oh.make_node("QuantizeLinear", ["g", "y_s", "y_z"], ["y"], name="q"),
    ]
    m = make(
        nodes,
        [oh.make_tensor_value_info("x", TP.INT8, [2, 16])],
        [oh.make_tensor_value_info("y", TP.INT8, [2, 8])],
        inits,
    )
    m.opset_import[0].version = 21
    return m


def test_16_bit_codes_are_refused():
    r = compile_model(_int16_model(), "bitwise", FLOAT)
    (site,) = [s for s in r.sites if s.reason is not None and "region" in s.pattern]
    assert site.verdict == "rejected"
    assert site.reason.code == ReasonCode.UNSUPPORTED_INTERMEDIATE_TYPE
    assert "16-bit codes" in site.reason.message and "int16" in site.reason.message


def _model_of(kind: str, rank: int = 1) -> bytes:
    nodes, consts = region(kind)
    cs = {c.name: onnx.numpy_helper.to_array(c) for c in consts}
    for name, v, t in (("u_s", 0.05, np.float32), ("u_z", 0, np.int8), ("y_s", 1 / 64, np.float32),
                       ("y_z", -32, np.int8)):  # fmt: skip
        cs[name] = np.asarray(v, dtype=t)
    m = region_model(nodes, cs, "u", "y", "int8", rank, {"": 17})
    return m.SerializeToString()


def test_position_check_passes_on_an_elementwise_region():
    t = region_table(_model_of("gelu_erf"), "int8", 1, "default", "gelu")
    assert len(t) == 256 and len(set(t)) > 50


def test_position_check_fails_on_a_position_dependent_region():
    """Softmax over the tensor: each element depends on the others, which the check sees
    (the structural rule refuses such a region before it is ever run)."""
    with pytest.raises(RegionError) as e:
        region_table(_model_of("softmax"), "int8", 1, "default", "softmax")
    assert e.value.code == ReasonCode.REGION_POSITION_DEPENDENT
    assert "differently by position" in e.value.message


def test_a_wrong_table_is_caught(monkeypatch):
    """Negative control: a reference table with one entry changed is caught. The gate
    refutes the fusion (the target's LUT is compared with the table, not taken as given),
    and replaying the counterexample on the whole model finds the IR differing from ONNX
    Runtime: the tool's own InternalError, never a wrong "proven"."""
    real = unary_region.region_table

    def wrong(*a, **kw):
        t = list(real(*a, **kw))
        t[200] = t[200] - 1
        return tuple(t)

    monkeypatch.setattr(unary_region, "region_table", wrong)
    with pytest.raises(InternalError, match="differs from ONNX Runtime on output 'y'"):
        compile_model(matmul_region("hardswish"), "bitwise", FLOAT)


def test_position_dependent_region_is_refused_and_runs_on_the_host(monkeypatch):
    """Where ORT's answer for a code depends on its position, the region is no table: the
    site is refused with `region_position_dependent` and ORT runs the region on the host."""

    def dependent(blob, in_type, rank, level, what):
        raise RegionError(f"{what}: code 3 differs (injected)")

    monkeypatch.setattr(unary_region, "region_table", dependent)
    m = conv_region("hardswish")
    r = compile_model(m, "bitwise", FLOAT)
    (site,) = r.sites
    assert site.verdict == "rejected"
    assert site.reason.code == ReasonCode.REGION_POSITION_DEPENDENT
    assert "code 3 differs" in site.reason.message
    assert "fused" not in [n.op for n in r.graph.nodes]
    _equal_ort_default(m, r, seeds=(0,))


@pytest.mark.slow  # three CLI processes (about 4 s)
def test_cli_check_compile_run_equals_ort_default(tmp_path):
    """`prover check`, `npuc compile`, `npuc run` on SiLU after a 1x1 conv: proven, and the
    program's output equals ONNX Runtime's default session bit for bit."""
    from cli_helpers import npuc, prover

    m = conv_region("silu")
    path, prog, inp, out = (tmp_path / f for f in ("m.onnx", "m.npuprog", "in.npz", "out.npz"))
    onnx.save(m, path)
    r = prover("check", path, "--proofs-mode", "off", "--no-progress")
    assert r.returncode == 0 and "PROVEN" in r.stdout and "conv+silu" in r.stdout, r.stdout
    r = npuc("compile", path, "-o", prog, "--proofs-mode", "off", "--no-progress")
    assert r.returncode == 0, r.stderr
    feeds = random_inputs(m, 3)
    np.savez(inp, **feeds)
    r = npuc("run", prog, "--input", inp, "-o", out)
    assert r.returncode == 0, r.stderr
    with np.load(out) as got:
        np.testing.assert_array_equal(got["y"], session(m, "default").run(None, feeds)[0])


class _KernelPath:
    """A session whose kernel computes code `code` one off on some positions only (a fake
    vector body / scalar tail / thread chunk that differs), else the real session's."""

    def __init__(self, real, code: int, bad) -> None:
        self.real, self.code, self.bad = real, code, bad

    def get_inputs(self):
        return self.real.get_inputs()

    def run(self, names, feeds):
        (x,) = feeds.values()
        (y,) = self.real.run(names, feeds)
        flat_x, y = x.reshape(-1), np.array(y).reshape(-1)
        hit = (flat_x == self.code) & self.bad(np.arange(flat_x.size), flat_x.size, self)
        y[hit] = y[hit] + 1
        return [y.reshape(x.shape)]


@pytest.mark.parametrize(
    "where,bad",
    [
        # a scalar tail: the last n % 16 elements of a tensor longer than one vector
        ("tail", lambda i, n, s: (n > 16) & (i >= n - n % 16)),
        # one lane of the 16-wide vector body
        ("lane", lambda i, n, s: (n >= 16) & (i % 16 == 5) & (i < n - n % 16)),
        # a thread-pool chunk (the second half of a long tensor, default threads only)
        ("chunk", lambda i, n, s: (n > 60000) & (i > n // 2) & s.threaded),
        # the one-thread session's long run only (the last probe the check compares)
        ("one thread", lambda i, n, s: (n > 60000) & (not s.threaded)),
        # one short length only, at one position (where -77 is in its length-40 probe)
        ("length 40", lambda i, n, s: (n == 40) & (i == 11)),
        # one tail position of one length where -77 never sat before every code was
        # rotated through every position of every length
        ("length 40 position 3", lambda i, n, s: (n == 40) & (i == 3)),
    ],
)
def test_position_check_fails_if_a_kernel_path_differs(monkeypatch, where, bad):
    """The check that makes ORT's 256 answers a proof would fail if a kernel's tail path
    (or one lane, or one thread's chunk) computed a code differently: each fake path is
    caught, naming the code."""
    import compiler.ort.region_table as rt

    _probed(monkeypatch)
    real = rt._sessions

    def fake(blob, level):
        default, single = real(blob, level)
        a, b = _KernelPath(default, -77, bad), _KernelPath(single, -77, bad)
        a.threaded, b.threaded = True, False
        return a, b

    monkeypatch.setattr(rt, "_sessions", fake)
    with pytest.raises(RegionError) as e:
        rt.check_alone(_model_of("hardswish"), "int8", 1, "default")
    assert e.value.code == ReasonCode.REGION_POSITION_DEPENDENT
    assert "code -77" in e.value.message, where
    if where in ("one thread", "length 40"):  # the probe named is the one that differed
        assert f"({where if where == 'length 40' else 'length 65805, one thread'})" in (
            e.value.message
        )
    # the real sessions (this host's kernels) give one table
    monkeypatch.setattr(rt, "_sessions", real)
    assert len(rt.check_alone(_model_of("hardswish"), "int8", 1, "default").table) == 256


def test_position_check_sessions_do_not_spin():
    """The check's ~1,300 short runs leave ORT's pool threads idle in between: they sleep
    rather than spin (spinning cost more CPU than the runs); the thread counts stay ORT's
    default and one."""
    import compiler.ort.region_table as rt

    for s in rt._sessions(_model_of("hardswish"), "default"):
        opts = s.get_session_options()
        assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert [s.get_session_options().intra_op_num_threads for s in rt._sessions(
        _model_of("hardswish"), "default")] == [0, 1]  # fmt: skip


@pytest.mark.parametrize("level", ["default", "off"])
def test_region_out_type_is_the_type_a_session_of_its_own_gives(level):
    """The `lut`'s output type comes from the check's own runs (no third session): the
    type a separate session of the region model at the same level gives."""
    from compiler.ort.region_table import region_out_type

    blob = _model_of("hardswish")
    (y,) = session(blob, level).run(None, {"u": np.zeros(1, np.int8)})
    assert region_out_type(blob, "int8", 1, level) == str(y.dtype) == "int8"


def test_hardswish_as_ort_inlines_it_is_the_hardswish_kind():
    """ORT's session inlines HardSwish as Mul(x, HardSigmoid(x; 1/6, 0.5)): still the
    hardswish region (a target building only named functions can fuse it); other
    HardSigmoid parameters or another operand are a loaded table."""
    dq = oh.make_node("DequantizeLinear", ["u", "s", "z"], ["f"])
    q = oh.make_node("QuantizeLinear", ["g", "s", "z"], ["y"])

    def members(alpha: float, other: str = "f") -> list:
        hs = oh.make_node("HardSigmoid", ["f"], ["h"], alpha=alpha, beta=0.5)
        return [dq, hs, oh.make_node("Mul", [other, "h"], ["g"]), q]

    assert unary_region.kind(members(1 / 6)) == "hardswish"
    assert unary_region.kind(members(0.2)) == "table"
    assert unary_region.kind(members(1 / 6, other="h")) == "table"


@pytest.mark.parametrize("build", [conv_region], ids=["qlinearconv"])
def test_region_input_typed_when_value_info_leaves_the_compute_output_untyped(build):
    """ORT's QOperator quantizer keeps the float model's value_info, which does not name the
    quantized values (so no inference runs): the region's input type is the one the
    QLinearConv states by its output zero point (was: untyped, no region, the zoo's QOperator HardSwish stayed on the host)."""
    m = build("hardswish")
    m.graph.value_info.append(oh.make_tensor_value_info("f", TP.FLOAT, None))
    assert unary_region.value_types(m)["u"] == "int8"


class _OneRegionPath:
    """A merged session (`region_table.merged_model`) whose region `j` computes code
    `code` one off at one position of one length (a fake tail path of one region only);
    its regions' outputs are one concatenated output (all of one type, the first output):
    copy c (fed the c-th input; one copy unless batched) of region `j` is its
    `c * regions + j`-th slice."""

    def __init__(self, real, j: int, code: int, length: int, pos: int, regions: int) -> None:
        self.real, self.j, self.code, self.length, self.pos = real, j, code, length, pos
        self.regions = regions
        self.inputs_seen: set[int] = set()

    def get_inputs(self):
        return self.real.get_inputs()

    def run(self, names, feeds):
        ys = [np.array(y) for y in self.real.run(names, feeds)]
        self.inputs_seen.add(len(feeds))
        for c, x in enumerate(feeds.values()):
            x = x.reshape(-1)
            if x.size == self.length and x[self.pos] == self.code:
                ys[0].reshape(-1)[(c * self.regions + self.j) * self.length + self.pos] += 1
        return ys


def _probed(monkeypatch) -> None:
    """No kernel modelled: every region goes through the position check's probes."""
    monkeypatch.setattr(pe, "PER_ELEMENT", frozenset())
    monkeypatch.setattr(pe, "PER_ELEMENT_X86_64", frozenset())
    monkeypatch.setattr(pe, "PER_ELEMENT_FMA3", frozenset())
    monkeypatch.setattr(pe, "_PER_ELEMENT", {})


def _fresh_cache(monkeypatch):
    import compiler.ort.region_table as rt

    monkeypatch.setattr(rt, "_TABLES", {})
    return rt


def test_prefetched_tables_are_the_tables_each_region_checked_alone_gives(monkeypatch):
    """Regions checked together in one merged model (one run per probe for all) get the
    table and output type each gets checked alone, and the conversion then runs no check."""
    rt = _fresh_cache(monkeypatch)
    kinds = ("hardswish", "gelu_erf", "hardsigmoid", "silu")
    blobs = [_model_of(k) for k in kinds]
    assert rt.prefetch([(b, "int8", 1, "default") for b in blobs]) == len(kinds)
    for b in blobs:
        assert rt._TABLES[(b, "int8", 1, "default")] == rt.check_alone(b, "int8", 1, "default")

    def no_check(*a):
        raise AssertionError("a prefetched region was checked again")

    monkeypatch.setattr(rt, "check_alone", no_check)
    assert (
        region_table(blobs[1], "int8", 1, "default", "gelu")
        == rt._TABLES[(blobs[1], "int8", 1, "default")].table
    )


def _model_of_type(kind: str, out: type, rank: int = 2) -> bytes:
    """`_model_of(kind, rank)` quantizing to `out` (int8 or uint8)."""
    nodes, consts = region(kind)
    cs = {c.name: onnx.numpy_helper.to_array(c) for c in consts}
    cs |= {"u_s": np.asarray(0.05, np.float32), "u_z": np.asarray(0, np.int8),
           "y_s": np.asarray(1 / 64, np.float32), "y_z": np.asarray(3, out)}  # fmt: skip
    return region_model(nodes, cs, "u", "y", "int8", rank, {"": 17}).SerializeToString()


def test_merged_regions_share_one_input_and_one_output_per_type(monkeypatch):
    """A merged model reads one input and concatenates the outputs of the regions of each
    known output type (an unknown type: an output of its own); every region still gets the
    table and type it gets checked alone, int8 and uint8 side by side."""
    rt = _fresh_cache(monkeypatch)
    monkeypatch.setattr(rt, "_UNCHECKED", {})
    blobs = [_model_of_type(k, t) for k, t in (("hardswish", np.int8), ("silu", np.uint8),
             ("gelu_erf", np.int8), ("hardsigmoid", np.uint8), ("silu", np.int8))]  # fmt: skip
    keys = [(b, "int8", 2, "default") for b in blobs]
    for key in keys[:4]:  # the last one's type is not known yet
        rt.unchecked_table(*key)
    types = [rt._known_type(k) for k in keys]
    assert types == ["int8", "uint8", "int8", "uint8", None]
    merged = rt.merged_model(blobs, types)
    assert merged.outputs == (("y_int8", (0, 2)), ("y_uint8", (1, 3)), ("r4_y", (4,)))
    assert merged.rows == ("y_int8_rows", "y_uint8_rows")  # pins each region's shape
    m = onnx.load_from_string(merged.blob)
    assert [i.name for i in m.graph.input] == ["probe"]
    assert rt.prefetch(keys) == len(blobs)
    for key in keys:
        assert rt._TABLES[key] == rt.check_alone(*key)
    assert {rt._TABLES[k].out_type for k in keys} == {"int8", "uint8"}


def test_a_batch_leaves_a_region_that_differs_to_its_own_check(monkeypatch):
    """In a batch, a region whose output differs at one tail position of one length only,
    or that is no elementwise function (Softmax), is not cached: its own check runs when it
    is converted and names the probe; the other regions of the batch are cached."""
    rt = _fresh_cache(monkeypatch)
    blobs = [_model_of(k, rank=2) for k in ("hardswish", "softmax", "gelu_erf")]
    for b in blobs:  # as the frontend has them when it checks: emitted with ORT's table
        rt.unchecked_table(b, "int8", 2, "default")
    real = rt._sessions
    faked: list[_OneRegionPath] = []

    def fake(blob, level, threads=(0, 1)):
        a, *rest = real(blob, level, threads)
        if a.get_inputs()[0].name == "u":  # a region checked alone: ORT's own kernels
            return [a, *rest]
        faked.append(_OneRegionPath(a, 2, -77, 40, 3, len(blobs)))
        return [faked[-1], *rest]

    monkeypatch.setattr(rt, "_sessions", fake)
    assert rt.prefetch([(b, "int8", 2, "default") for b in blobs]) == 1
    assert set(rt._TABLES) == {(blobs[0], "int8", 2, "default")}
    # the length probes ran in copies of the regions (one input each) and were compared
    assert max(len(f.inputs_seen) and max(f.inputs_seen) for f in faked) > 1
    with pytest.raises(RegionError, match="differently by position"):
        region_table(blobs[1], "int8", 2, "default", "softmax")
    assert len(region_table(blobs[2], "int8", 2, "default", "gelu")) == 256  # alone: real


def test_a_model_with_many_regions_checks_them_in_one_batch(monkeypatch):
    """The frontend checks a model's regions together before converting any (one merged
    model), and the compiled result is the one each region checked alone gives."""
    rt = _fresh_cache(monkeypatch)
    batches = []
    real = rt.prefetch

    def spy(reqs):
        reqs = list(reqs)
        batches.append(len(reqs))
        return real(reqs)

    monkeypatch.setattr(unary_region, "region_prefetch", spy)
    m = _side_by_side(conv_region("hardswish"), conv_region("silu"))
    r = compile_model(m, "bitwise", FLOAT)
    assert batches == [2]
    assert len(rt._TABLES) == 2
    assert [s.verdict for s in r.sites] == ["proven", "proven"]
    _equal_ort_default(m, r, seeds=(0,))


def _side_by_side(a: onnx.ModelProto, b: onnx.ModelProto) -> onnx.ModelProto:
    """Models `a` and `b` as one (b's names prefixed `b_`): two inputs, two outputs."""
    b = onnx.compose.add_prefix(b, "b_")
    g = onnx.helper.make_graph(
        [*a.graph.node, *b.graph.node],
        "two",
        [*a.graph.input, *b.graph.input],
        [*a.graph.output, *b.graph.output],
        [*a.graph.initializer, *b.graph.initializer],
    )
    m = onnx.helper.make_model(g, opset_imports=list(a.opset_import))
    m.ir_version = a.ir_version
    return m


def test_the_build_that_only_names_errors_checks_no_region(monkeypatch):
    """A QDQ model is read as ORT's default session rewrites it, and as written only where
    that is needed (float16 values, or a failure to name by the user's nodes; that IR is
    discarded). Only ORT's graph's regions are position-checked; the model as written takes
    ORT's table of each unchecked."""
    from compiler.frontend.checked import validate
    from compiler.frontend.reader import _read_as_written
    from prover.reference import ONNX as ONNX_REF

    rt = _fresh_cache(monkeypatch)
    monkeypatch.setattr(rt, "_UNCHECKED", {})
    checked, unchecked = [], []
    real_alone, real_unchecked = rt.check_alone, rt.unchecked_table

    def alone(*a):
        checked.append(a[0])
        return real_alone(*a)

    def quick(*a):
        unchecked.append(a[0])
        return real_unchecked(*a)

    monkeypatch.setattr(rt, "check_alone", alone)
    monkeypatch.setattr(rt, "unchecked_table", quick)
    m = qdq_conv_region("silu")
    r = compile_model(m, "bitwise", FLOAT)
    assert len(checked) == 1  # the region of ORT's graph, once
    assert len(set(unchecked)) == 1 and checked[0] in unchecked  # its placeholder
    assert [k[0] for k in rt._TABLES] == checked
    (site,) = r.sites
    assert site.verdict == "proven"
    _equal_ort_default(m, r)
    _read_as_written(validate(m).proto, ONNX_REF)  # the model as written (no float16)
    assert len(checked) == 1 and len(set(unchecked)) == 2  # its region: a placeholder only


def test_every_lut_of_a_build_carries_its_checked_table(monkeypatch):
    """A region's `lut` is emitted with ORT's table of one run and checked at the end of
    the build: the IR's table is the checked one (here made to differ in one entry, which
    the IR then holds)."""
    from compiler.frontend.reader import to_ir

    rt = _fresh_cache(monkeypatch)
    real = unary_region.region_table

    def marked(*a, **kw):
        t = list(real(*a, **kw))
        t[7] += 1
        return tuple(t)

    monkeypatch.setattr(unary_region, "region_table", marked)
    g, _ = to_ir(conv_region("hardswish"))
    (lut,) = [n for n in g.nodes if n.op == "lut" and n.attrs.get("source") == "region"]
    ((_, ct),) = rt._TABLES.items()
    assert lut.attrs["table"][7] == ct.table[7] + 1
    assert lut.attrs["table"][:7] == ct.table[:7]


def test_a_batch_ort_cannot_run_is_left_to_each_check_but_our_own_bug_is_not(monkeypatch):
    """A merged batch whose session ORT refuses (here a Sigmoid on int8 codes, which has no
    kernel) caches nothing and raises nothing: each region is then checked alone, which
    names the failure. An error of our own around the runs is not taken for ORT's refusal."""
    _probed(monkeypatch)  # the probes' batching is what this tests
    rt = _fresh_cache(monkeypatch)
    bad_node = oh.make_node("Sigmoid", ["u"], ["y"])
    bad = region_model([bad_node], {}, "u", "y", "int8", 1, {"": 17}).SerializeToString()
    good = _model_of("silu")
    keys = [(b, "int8", 1, "default") for b in (good, bad)]
    assert rt.prefetch(keys) == 0 and not rt._TABLES
    with pytest.raises(Exception, match="(?i)sigmoid|implement|kernel"):
        rt.check_alone(bad, "int8", 1, "default")

    def broken(*a):
        raise TypeError("a bug of ours")

    monkeypatch.setattr(rt, "_check_many", broken)
    with pytest.raises(TypeError, match="a bug of ours"):
        rt.prefetch([(good, "int8", 1, "default"), (_model_of("gelu_erf"), "int8", 1, "default")])


def test_merged_regions_each_of_the_wrong_size_are_not_tables(monkeypatch):
    """Concatenated outputs hide each region's size: one region writing its codes twice
    beside one writing nothing adds up to two regions' worth of the right values. Every
    region must write a tensor of the probe's shape, so neither is taken for a table; two
    regions that both write twice the values are refused too."""
    rt = _fresh_cache(monkeypatch)

    def blob(nodes, consts=None):
        m = region_model(nodes, consts or {}, "u", "y", "int8", 2, {"": 17})
        return m.SerializeToString()

    twice = blob([oh.make_node("Concat", ["u", "u"], ["y"], axis=-1)])
    empty = blob(
        [oh.make_node("Slice", ["u", "s", "e", "ax"], ["y"])],
        {"s": np.array([0]), "e": np.array([0]), "ax": np.array([-1])},
    )
    codes, lo = rt._codes("int8")
    for blobs in ([twice, empty], [twice, twice]):
        merged = rt.merged_model(blobs, ["int8", "int8"])
        assert merged.rows == ("y_int8_rows",)
        sess, single = rt._sessions(merged.blob, "default")
        many = rt.merged_model(blobs, ["int8", "int8"], copies=4)  # the batched length runs
        for batched in (None, (many, rt._sessions(many.blob, "default", threads=(0,))[0])):
            try:
                found = rt._check_many(merged, sess, single, codes, lo, 2, batched)
            except rt.ort_errors():  # ORT's Concat refuses the shapes: each checked alone
                continue
            assert found == [None, None]
    good = [_model_of("silu"), _model_of("hardswish")]
    assert rt.prefetch([(b, "int8", 1, "default") for b in good]) == 2  # rank 1: own outputs


def test_few_regions_run_a_lengths_probes_in_copies_with_the_tables_of_each_alone(monkeypatch):
    """Few region nodes: a length's 256 probes run `batch_copies` at a time in a model of
    that many copies of the regions (copy j reads its own input, so every kernel reads the
    probe it reads alone); the tables and types are those each region's check alone gives.
    Many region nodes stay one copy (a larger session would cost more than the runs)."""
    _probed(monkeypatch)  # the probes' batching is what this tests
    rt = _fresh_cache(monkeypatch)
    blobs = [_model_of_type(k, t) for k, t in (("hardswish", np.int8), ("silu", np.uint8),
             ("gelu_erf", np.int8))]  # fmt: skip
    keys = [(b, "int8", 2, "default") for b in blobs]
    for key in keys:
        rt.unchecked_table(*key)
    types = [rt._known_type(k) for k in keys]
    merged = rt.merged_model(blobs, types)
    per_copy = len(onnx.load_from_string(merged.blob).graph.node) - 2 * len(merged.rows)
    copies = rt.batch_copies(merged, types, 2)
    assert (
        copies > 1
        and copies * per_copy <= rt.COPY_NODES < 2 * copies * per_copy
        or (copies == rt.MAX_COPIES)
    )
    many = rt.merged_model(blobs, types, copies)
    m = onnx.load_from_string(many.blob)
    assert [i.name for i in m.graph.input] == [f"probe{j}" for j in range(copies)]
    # each type's regions in one output (one region of uint8: its copies concatenated)
    assert many.outputs == (("y_int8", (0, 2)), ("y_uint8", (1,)))
    assert many.rows == ("y_int8_rows", "y_uint8_rows")
    assert len(m.graph.node) == copies * per_copy + 2 * len(many.outputs)
    runs: list[int] = []
    real = rt._sessions

    def counting(blob, level, threads=(0, 1)):
        out = list(real(blob, level, threads))
        if out[0].get_inputs()[0].name == "probe0":
            inner = out[0]

            class Counted:
                def get_inputs(self):
                    return inner.get_inputs()

                def run(self, names, feeds):
                    runs.append(len(feeds))
                    return inner.run(names, feeds)

            out[0] = Counted()
        return out

    monkeypatch.setattr(rt, "_sessions", counting)
    assert rt.prefetch(keys) == len(blobs)
    assert runs == [copies] * (len(rt.LENGTHS) * 256 // copies)
    for key in keys:
        assert rt._TABLES[key] == rt.check_alone(*key)
    assert rt.batch_copies(merged, [*types[:2], None], 2) == 1  # a type not known
    assert rt.batch_copies(merged, types, 1) == 1  # rank 1: no axis to pin shapes with
    monkeypatch.setattr(rt, "COPY_NODES", per_copy)  # no room for two copies
    assert rt.batch_copies(merged, types, 2) == 1
    with pytest.raises(ValueError):
        rt.merged_model(blobs, [*types[:2], None], copies=2)


def _qop_silu(x_scale: float = 0.05, b_const: np.ndarray | None = None) -> bytes:
    """QLinearSigmoid -> QLinearMul(u, sigmoid(u)): the SiLU ORT runs for a QOperator or a
    QDQ model. With `b_const`, the Mul's second operand is that constant instead."""
    ms = "com.microsoft"
    b = "s" if b_const is None else "b"
    nodes = [
        oh.make_node("QLinearSigmoid", ["u", "u_s", "u_z", "s_s", "s_z"], ["s"], name="sig",
                     domain=ms),
        oh.make_node("QLinearMul", ["u", "u_s", "u_z", b, "s_s", "s_z", "y_s", "y_z"], ["y"],
                     name="mul", domain=ms),
    ]  # fmt: skip
    cs = {"u_s": np.float32(x_scale), "u_z": np.int8(0), "s_s": np.float32(1 / 256),
          "s_z": np.int8(-128), "y_s": np.float32(1 / 64), "y_z": np.int8(-32)}  # fmt: skip
    if b_const is not None:
        cs["b"] = b_const
    return region_model(
        nodes, cs, "u", "y", "int8", 2, {"": 17, "com.microsoft": 1}
    ).SerializeToString()


def _counting_sessions(monkeypatch, rt) -> list[int]:
    """Count the runs of every session the position check makes, and of the session that
    read a modelled region's graph back (it serves the one run)."""
    runs: list[int] = []
    real, real_read = rt._sessions, rt.read_session

    def counting(blob, level, threads=(0, 1)):
        return [_Counted(s, runs) for s in real(blob, level, threads)]

    def counting_read(blob, level):
        s = real_read(blob, level)
        return None if s is None else _Counted(s, runs)

    monkeypatch.setattr(rt, "_sessions", counting)
    monkeypatch.setattr(rt, "read_session", counting_read)
    return runs


class _Counted:
    """A session whose runs are counted in `runs`."""

    def __init__(self, inner, runs: list[int]):
        self.inner, self.runs = inner, runs

    def get_inputs(self):
        return self.inner.get_inputs()

    def run(self, names, feeds):
        self.runs.append(1)
        return self.inner.run(names, feeds)


def test_a_region_of_per_element_kernels_is_its_table_in_one_run(monkeypatch):
    """QLinearSigmoid then QLinearMul: kernels that compute every element by one function
    (ORT's source: a table lookup, and a tail through the same vector code) are modelled, not
    probed: one run, and the table is the one the full position check finds."""
    rt = _fresh_cache(monkeypatch)
    monkeypatch.setattr(pe, "_PER_ELEMENT", {})
    blob = _qop_silu()
    assert pe.runs_per_element(blob, "default")
    runs = _counting_sessions(monkeypatch, rt)
    modelled = rt.check_alone(blob, "int8", 2, "default")
    assert len(runs) == 1
    _probed(monkeypatch)
    assert not pe.runs_per_element(blob, "default")
    probed = rt.check_alone(blob, "int8", 2, "default")
    assert len(runs) > 16000 and probed == modelled and len(set(modelled.table)) > 50


def test_a_batch_of_per_element_regions_takes_one_run(monkeypatch):
    rt = _fresh_cache(monkeypatch)
    monkeypatch.setattr(pe, "_PER_ELEMENT", {})
    blobs = [_qop_silu(s) for s in (0.05, 0.03, 0.08)]
    keys = [(b, "int8", 2, "default") for b in blobs]
    runs = _counting_sessions(monkeypatch, rt)
    assert rt.prefetch(keys) == 3 and len(runs) == 1
    tables = [rt._TABLES[k] for k in keys]
    assert len({t.table for t in tables}) == 3
    _probed(monkeypatch)
    assert [rt.check_alone(*k) for k in keys] == tables  # what the probes find


def test_regions_with_other_kernels_or_a_constant_operand_are_probed(monkeypatch):
    rt = _fresh_cache(monkeypatch)
    monkeypatch.setattr(pe, "_PER_ELEMENT", {})
    leaky = _model_of("leakyrelu", 2)
    assert not pe.runs_per_element(leaky, "default")  # LeakyRelu
    assert pe.read_session(leaky, "default") is None  # no session kept for a probed region
    # a Mul by a two-element constant: the value depends on the position
    vec = _qop_silu(b_const=np.array([[3], [-5]], dtype=np.int8))
    assert not pe.runs_per_element(vec, "default")
    scalar = _qop_silu(b_const=np.array(7, dtype=np.int8))  # one element: every position alike
    assert pe.runs_per_element(scalar, "default")
    with pytest.raises(RegionError):
        rt.check_alone(vec, "int8", 2, "default")  # not one table: refused


MODELLED = pe.modelled_kernels()


@pytest.mark.parametrize(
    "kind,kernels",
    [
        ("hardswish", pe.PER_ELEMENT_X86_64),
        ("hardsigmoid", pe.PER_ELEMENT_X86_64),
        ("silu", pe.PER_ELEMENT_X86_64),
        ("silu_qdq", pe.PER_ELEMENT_X86_64),
        ("gelu_erf", pe.PER_ELEMENT_FMA3),
        ("gelu_tanh", pe.PER_ELEMENT_FMA3),
    ],
)
def test_a_region_of_float_per_element_kernels_is_its_table_in_one_run(monkeypatch, kind, kernels):
    """DequantizeLinear, HardSigmoid, Sigmoid, Mul, QuantizeLinear (MobileNetV3's HardSwish,
    an int8 QDQ SiLU as ORT runs them) are modelled on x86-64: one run, and the table is the
    one the full position check finds on this host. GELU's Erf too where MLAS runs its
    FMA3 kernel."""
    if not kernels <= MODELLED:
        pytest.skip("this host's kernels are not the ones modelled for this region")
    rt = _fresh_cache(monkeypatch)
    monkeypatch.setattr(pe, "_PER_ELEMENT", {})
    blob = _model_of(kind, 2)
    assert pe.runs_per_element(blob, "default")
    runs = _counting_sessions(monkeypatch, rt)
    modelled = rt.check_alone(blob, "int8", 2, "default")
    assert len(runs) == 1
    _probed(monkeypatch)
    probed = rt.check_alone(blob, "int8", 2, "default")
    assert len(runs) > 16000 and probed == modelled and len(set(modelled.table)) > 20


def test_float_kernels_are_modelled_on_x86_64_hosts_only():
    fma3 = frozenset({"sse2", "avx", "avx2", "fma"})
    assert pe.modelled_kernels("x86_64", fma3) == pe.modelled_kernels("AMD64", fma3)
    assert pe.modelled_kernels("x86_64", fma3) == pe.PER_ELEMENT_FMA3
    for flags in (frozenset({"sse2", "avx"}), frozenset({"avx2"}), frozenset()):
        assert pe.modelled_kernels("x86_64", flags) == pe.PER_ELEMENT_X86_64  # no Erf
    assert pe.modelled_kernels("aarch64", fma3) == pe.modelled_kernels("arm64") == pe.PER_ELEMENT
    assert ("", "Sigmoid") not in pe.PER_ELEMENT and pe.PER_ELEMENT < pe.PER_ELEMENT_X86_64
    assert ("", "Erf") not in pe.PER_ELEMENT_X86_64 and pe.PER_ELEMENT_X86_64 < pe.PER_ELEMENT_FMA3


def test_a_float16_constant_leaves_the_region_to_the_probes():
    """A float16 scale makes DequantizeLinear's output and the float ops after it float16
    kernels, which are not the ones modelled."""
    nodes, consts = region("hardswish")
    g = oh.make_graph(nodes, "g", [], [], initializer=consts)
    assert pe._float32_constants(g)
    g.initializer.append(onnx.numpy_helper.from_array(np.array(0.5, np.float16), "h"))
    assert not pe._float32_constants(g)


def _transformer_gelu() -> bytes:
    """GELU as ORT's default session runs a quantized transformer's (BERT, ViT, GPT-2 in the
    zoo): DequantizeLinear, Div, Erf, QuantizeLinear, then QLinearAdd(+1) and two QLinearMul
    (by x and by one half) with one-element constants."""
    ms = "com.microsoft"
    nodes = [
        oh.make_node("DequantizeLinear", ["u", "u_s", "u_z"], ["f"], name="dq"),
        oh.make_node("Div", ["f", "sqrt2"], ["d"], name="div"),
        oh.make_node("Erf", ["d"], ["e"], name="erf"),
        oh.make_node("QuantizeLinear", ["e", "e_s", "e_z"], ["eq"], name="q"),
        oh.make_node("QLinearAdd", ["eq", "e_s", "e_z", "one", "o_s", "o_z", "a_s", "a_z"],
                     ["a"], name="add", domain=ms),
        oh.make_node("QLinearMul", ["u", "u_s", "u_z", "a", "a_s", "a_z", "m_s", "m_z"], ["m"],
                     name="mul", domain=ms),
        oh.make_node("QLinearMul", ["m", "m_s", "m_z", "half", "h_s", "h_z", "y_s", "y_z"],
                     ["y"], name="mul_half", domain=ms),
    ]  # fmt: skip
    f32, i8 = np.float32, np.int8
    cs = {"u_s": f32(0.03), "u_z": i8(3), "sqrt2": f32(np.sqrt(2.0)), "e_s": f32(1 / 127),
          "e_z": i8(0), "one": i8(127), "o_s": f32(1 / 127), "o_z": i8(0), "a_s": f32(1 / 64),
          "a_z": i8(-128), "m_s": f32(0.05), "m_z": i8(-20), "half": i8(100),
          "h_s": f32(0.005), "h_z": i8(0), "y_s": f32(0.04), "y_z": i8(-10)}  # fmt: skip
    return region_model(
        nodes, cs, "u", "y", "int8", 2, {"": 17, "com.microsoft": 1}
    ).SerializeToString()


def test_a_transformers_gelu_is_its_table_in_one_run_where_erf_is_modelled(monkeypatch):
    """The zoo's BERT/ViT/GPT-2 GELU region: one run on a host whose MLAS runs the FMA3 Erf
    kernel (the table the full position check finds), probed elsewhere."""
    rt = _fresh_cache(monkeypatch)
    monkeypatch.setattr(pe, "_PER_ELEMENT", {})
    blob = _transformer_gelu()
    modelled = pe.PER_ELEMENT_FMA3 <= MODELLED
    assert pe.runs_per_element(blob, "default") == modelled
    runs = _counting_sessions(monkeypatch, rt)
    table = rt.check_alone(blob, "int8", 2, "default")
    assert (len(runs) == 1) == modelled
    monkeypatch.setattr(pe, "PER_ELEMENT_FMA3", pe.PER_ELEMENT_X86_64)  # no FMA3: probed
    monkeypatch.setattr(pe, "_PER_ELEMENT", {})
    assert not pe.runs_per_element(blob, "default")
    _probed(monkeypatch)
    assert rt.check_alone(blob, "int8", 2, "default") == table and len(set(table.table)) > 20


def test_a_modelled_region_is_read_back_and_run_by_one_session(monkeypatch):
    """The session that reads a modelled region's graph back runs its codes too: one
    session in all, given once (a second check of another region makes its own)."""
    import onnxruntime as ort

    rt = _fresh_cache(monkeypatch)
    monkeypatch.setattr(pe, "_PER_ELEMENT", {})
    made = count_calls(monkeypatch, ort, "InferenceSession")
    blob = _qop_silu()
    table = rt.check_alone(blob, "int8", 2, "default")
    assert len(made) == 1 and len(set(table.table)) > 50
    assert pe.read_session(blob, "default") is None  # given once
    other = _qop_silu(0.07)
    assert rt.check_alone(other, "int8", 2, "default") != table and len(made) == 2
