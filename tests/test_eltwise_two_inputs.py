"""QLinearAdd / QLinearMul of two activations: ORT's kernel (`prover.eltwise`), the NPU unit's
record and the compiled program all equal ONNX Runtime bit for bit, on every operand pair.

The host's MLAS kernel is detected (`host_uses_fma`), never assumed: the reference's
element function and the NPU record are built for the FMA reading this host runs.
"""

from __future__ import annotations

import dataclasses
import platform

import numpy as np
import onnx
import pytest
from cli_helpers import npuc
from eltwise_models import eltwise_model, random_inputs
from onnx import TensorProto, helper

from compiler.api import compile_model
from compiler.frontend.reader import to_ir
from compiler.ir.semantics import run_graph
from compiler.ort.tables import session
from npu_backend import codegen, simulator
from npu_backend.isa import Eltwise
from npu_backend.ledger import model_ledger
from npu_backend.lowered import NpuEltwise
from npu_backend.program import Program
from npu_backend.target import load_target
from npu_backend.validate import broadcast_kind
from prover.domain import NUMPY
from prover.eltwise import EltwiseParams, npu_value
from prover.mlas import host_uses_fma
from prover.qlinear_binary import QLinearBinaryParams, qlinear_binary, span_mode

SLOW = pytest.mark.slow
FLOAT = load_target("npu_backend/targets/npu_float.toml")
FIXED = load_target("npu_backend/targets/npu_fixed.toml")
F32 = np.float32
X86 = platform.machine().lower() in ("x86_64", "amd64")
pytestmark = pytest.mark.skipif(not X86, reason="ORT's x86-64 MLAS kernels are modelled")
HOST_FMA = host_uses_fma() if X86 else True


def _pairs(dtype: str, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """A and B covering every pair of 8-bit values once, in the layout's shapes."""
    i = np.iinfo(dtype)
    v = np.arange(i.min, i.max + 1, dtype=np.int64)
    if layout == "same":  # [1, 256, 16, 16] + [1, 256, 16, 16]
        a = np.repeat(v, 256).reshape(1, 256, 16, 16)
        b = np.tile(v, 256).reshape(1, 256, 16, 16)
    elif layout == "inner_b":  # [1, 256, 16, 16] + [1, 256, 1, 1]: B one value per channel
        a = np.tile(v, 256).reshape(1, 256, 16, 16)
        b = v.reshape(1, 256, 1, 1)
    elif layout == "inner_a":  # [1, 256, 1, 1] + [1, 256, 16, 16]: ORT swaps the roles
        a = v.reshape(1, 256, 1, 1)
        b = np.tile(v, 256).reshape(1, 256, 16, 16)
    else:  # "outer": [1, 256, 16, 16] + [16, 16]
        a = np.repeat(v, 256).reshape(1, 256, 16, 16)
        b = v.reshape(16, 16)
    return a, b


def _ort(op: str, a: np.ndarray, b: np.ndarray, p: QLinearBinaryParams) -> np.ndarray:
    names = ["a", "as", "az", "b", "bs", "bz", "cs", "cz"]
    t = TensorProto.UINT8 if p.dtype == "uint8" else TensorProto.INT8
    node = helper.make_node(op, names, ["c"], domain="com.microsoft")
    shapes = {"a": list(a.shape), "b": list(b.shape)}
    ins = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT if n.endswith("s") else t, shapes.get(n))
        for n in names
    ]
    out = helper.make_tensor_value_info("c", t, list(np.broadcast_shapes(a.shape, b.shape)))
    g = helper.make_graph([node], "g", ins, [out])
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    m.ir_version = 8
    dt = p.dtype
    feed = {
        "a": a.astype(dt), "b": b.astype(dt), "as": np.array(p.a_scale, F32),
        "bs": np.array(p.b_scale, F32), "cs": np.array(p.c_scale, F32),
        "az": np.array(p.a_zp, dt), "bz": np.array(p.b_zp, dt), "cz": np.array(p.c_zp, dt),
    }  # fmt: skip
    return session(m, level="default").run(None, feed)[0].astype(np.int64)


def _param_sets(dtype: str) -> list[QLinearBinaryParams]:
    """Zero points at the type's ends and middle, scale ratios from 1/4096 to 3e7, near-ties."""
    i = np.iinfo(dtype)
    lo, hi, mid = int(i.min), int(i.max), (0 if dtype == "int8" else 128)
    tie = F32(2.0**-6 * 3 * (1 + 3 * 2.0**-23))  # a short binary fraction a few ulps off
    sets = [
        ((0.02, lo), (0.031, hi), (0.04, mid)),
        ((0.02, hi), (0.02, lo), (0.02, lo)),
        ((0.5, mid), (0.25, mid), (1e-3, hi)),  # ratios 500 and 250: saturation everywhere
        ((1e-4, lo), (3e-4, hi), (0.4, mid)),  # ratios ~1/4000: almost constant output
        ((float(tie), 3 + lo), (float(tie) * 2, hi - 7), (float(tie) * 4, mid + 1)),
        ((0.0117, mid + 5), (0.0093, mid - 9), (0.0201, lo + 11)),
        # beyond int32 after scaling: MLAS's cvtps gives INT32_MIN, which saturates to the
        # type's minimum (not its maximum) on the vector paths
        ((3000.0, mid), (1.0, lo), (1e-4, lo)),
    ]
    return [
        QLinearBinaryParams(
            a_scale=sa, a_zp=za, b_scale=sb, b_zp=zb, c_scale=sc, c_zp=zc, dtype=dtype
        )
        for (sa, za), (sb, zb), (sc, zc) in sets
    ]


# the default run keeps one case per op and layout kind; the rest under -m slow
FAST = {
    ("QLinearAdd", "uint8", "same"), ("QLinearAdd", "int8", "inner_b"),
    ("QLinearMul", "int8", "same"), ("QLinearMul", "uint8", "inner_b"),
}  # fmt: skip
CASES = [
    pytest.param(o, d, lay, marks=() if (o, d, lay) in FAST else SLOW)
    for o in ("QLinearAdd", "QLinearMul")
    for d in ("uint8", "int8")
    for lay in ("same", "inner_b", "inner_a", "outer")
]


@pytest.mark.parametrize("op,dtype,layout", CASES)
def test_reference_and_npu_record_equal_onnxruntime_on_every_pair(op, dtype, layout):
    a, b = _pairs(dtype, layout)
    mode = span_mode(a.shape, b.shape)
    sets = _param_sets(dtype)
    # default run: extreme zero points, a saturating ratio, a near-tie, int32 overflow
    # (-m slow: all seven)
    for p in sets[::2] if (op, dtype, layout) in FAST else sets:
        want = _ort(op, a, b, p)
        np.testing.assert_array_equal(qlinear_binary(op, a, b, p, fma=HOST_FMA), want)
        rec = EltwiseParams.of(op, p, mode, fma=HOST_FMA)
        a64, b64 = np.broadcast_arrays(a, b)
        np.testing.assert_array_equal(npu_value(NUMPY, a64, b64, **rec.params()), want)


def test_broadcast_kinds():
    assert broadcast_kind((1, 8, 5, 5), (1, 8, 5, 5)) == "same"
    assert broadcast_kind((8, 5, 5), (1, 8, 5, 5)) == "same"
    assert broadcast_kind((1, 8, 5, 5), (1, 8, 1, 1)) == "inner"
    assert broadcast_kind((1, 8, 1, 1), (1, 8, 5, 5)) == "inner"
    assert broadcast_kind((1, 8, 5, 5), (5,)) == "outer"
    assert broadcast_kind((1, 8, 5, 5), (1, 1, 5, 5)) == "outer"


def _compile_run(m, target=FLOAT, seeds=(0, 1, 2)):
    """Compile for `target` under this host's reference; the IR meaning and the simulated
    program equal ORT's default session on random and extreme inputs."""
    r = compile_model(m, "bitwise", target, reference="ort-host")
    prog = codegen.generate(r.lowered, target)
    for seed in seeds:
        feed = random_inputs(m, seed, extremes=seed == 2)
        outs = session(m, "default").run(None, feed)
        want = dict(zip([o.name for o in m.graph.output], outs, strict=True))
        got, _ = simulator.run(prog, feed)
        ir = run_graph(r.original, feed)
        for k, v in want.items():
            np.testing.assert_array_equal(got[k], v)
            np.testing.assert_array_equal(ir[k], v)
    return r, prog


def _eltwise_steps(r) -> list[NpuEltwise]:
    return [s for s in r.lowered.steps if isinstance(s, NpuEltwise)]


def test_residual_add_runs_on_the_npu():
    m = eltwise_model(dtype="int8", zps=(-3, 5, 1), residual_conv=True, a_shape=(1, 8, 6, 6))
    r, prog = _compile_run(m)
    (step,) = _eltwise_steps(r)
    assert step.record.binary == "add" and not [d for d in r.diagnostics if "elt" in d.nodes]
    assert sum(isinstance(i, Eltwise) for i in prog.instructions) == 1


@pytest.mark.parametrize("dtype", ["uint8", pytest.param("int8", marks=SLOW)])
def test_squeeze_excitation_scaling_runs_on_the_npu(dtype):
    zps = (0, 255, 128) if dtype == "uint8" else (-128, 127, 0)
    m = eltwise_model("QLinearMul", dtype, (1, 8, 5, 5), (1, 8, 1, 1), zps=zps)
    r, _ = _compile_run(m)
    (step,) = _eltwise_steps(r)
    assert step.record.binary == "mul" and broadcast_kind(step.a_shape, step.b_shape) == "inner"


def _host_diag(r):
    (d,) = [d for d in r.diagnostics if "elt" in d.nodes]
    return d


def test_target_without_the_unit_keeps_it_on_the_host():
    r, _ = _compile_run(eltwise_model(), FIXED, seeds=(0,))
    assert not _eltwise_steps(r)
    d = _host_diag(r)
    assert d.code == "unsupported_eltwise" and "no add of two activations" in d.message


@pytest.mark.parametrize(
    "caps,model,what",
    [
        (dict(broadcast=frozenset({"same"})), dict(b_shape=(1, 8, 1, 1)), "broadcast as 'inner'"),
        pytest.param(
            dict(types=frozenset({"uint8"})),
            dict(dtype="int8", zps=(1, 2, 3)),
            "not int8",
            marks=SLOW,
        ),
        pytest.param(dict(ops=frozenset({"add"})), dict(op="QLinearMul"), "no mul", marks=SLOW),
    ],
    ids=["broadcast", "dtype", "op"],
)
def test_what_the_unit_lacks_has_its_reason(caps, model, what):
    t = dataclasses.replace(FLOAT, eltwise=dataclasses.replace(FLOAT.eltwise, **caps))
    r, _ = _compile_run(eltwise_model(**model), t, seeds=(0,))
    assert not _eltwise_steps(r)
    d = _host_diag(r)
    assert d.code == "unsupported_eltwise" and what in d.message


def test_unit_rounding_other_than_the_hosts_is_refuted_and_stays_on_the_host():
    """A unit that does not fuse its multiply-adds where this host's ORT does (or the
    reverse) differs on one operand pair for these scales: the lowering obligation is
    refuted and the op stays on the host (still equal to ORT)."""
    scales, zps = (0.06857142597436905, 0.026000000536441803, 0.023076923564076424), (76, 72, 223)
    p = QLinearBinaryParams(
        a_scale=scales[0], a_zp=zps[0], b_scale=scales[1], b_zp=zps[1], c_scale=scales[2],
        c_zp=zps[2], dtype="uint8",
    )  # fmt: skip
    a, b = _pairs("uint8", "same")
    fused = qlinear_binary("QLinearAdd", a, b, p, fma=True)
    assert (fused != qlinear_binary("QLinearAdd", a, b, p, fma=False)).sum() == 1
    t = dataclasses.replace(FLOAT, eltwise=dataclasses.replace(FLOAT.eltwise, fma=not HOST_FMA))
    r, _ = _compile_run(eltwise_model(scales=scales, zps=zps), t, seeds=(0,))
    assert not _eltwise_steps(r)
    d = _host_diag(r)
    assert d.code == "refuted" and "lowering obligation" in d.message


def test_activation_after_the_op_is_proposed_proven_and_fused():
    m = eltwise_model(activation="Sigmoid", zps=(0, 255, 128))
    r, prog = _compile_run(m)
    (site,) = r.sites
    assert site.pattern == "qlinearadd+sigmoid" and site.verdict == "proven" and site.applied
    (step,) = _eltwise_steps(r)
    assert step.lut is not None and step.out == "y"
    (ins,) = [i for i in prog.instructions if isinstance(i, Eltwise)]
    assert ins.table_slot is not None  # one instruction: the add and its table
    again = Program.from_bytes(prog.to_bytes())  # the program file keeps the record
    feed = random_inputs(m, 5)
    assert again.instructions == prog.instructions
    np.testing.assert_array_equal(
        simulator.run(again, feed)[0]["y"], simulator.run(prog, feed)[0]["y"]
    )
    (entry,) = model_ledger(r.lowered, FLOAT).fusions  # measured against the unfused form
    assert entry.intermediate == "y.pre_act" and entry.bytes_not_written == 200


def test_activation_of_a_value_used_twice_is_not_fused():
    m = eltwise_model("QLinearMul", activation="Sigmoid", extra_user=True, b_shape=(1, 8, 1, 1))
    r, _ = _compile_run(m)
    (site,) = r.sites
    assert site.verdict == "rejected" and site.reason.code == "multiple_users"
    (step,) = _eltwise_steps(r)
    assert step.lut is None  # the op itself still runs on the NPU, the table beside it


def test_activation_the_unit_lacks_stays_a_separate_op():
    caps = dataclasses.replace(FLOAT.eltwise, functions=frozenset({"tanh"}))
    r, _ = _compile_run(
        eltwise_model(activation="Sigmoid"), dataclasses.replace(FLOAT, eltwise=caps), (0,)
    )
    (site,) = r.sites
    assert site.verdict == "rejected" and site.reason.code == "unsupported_function"
    (step,) = _eltwise_steps(r)
    assert step.lut is None


@pytest.mark.parametrize(
    "act,dtype",
    [
        pytest.param("HardSwish", "uint8", marks=SLOW),
        pytest.param("HardSwish", "int8", marks=SLOW),
        pytest.param("Relu", "uint8", marks=SLOW),
        ("Relu", "int8"),
    ],
)
def test_unary_region_after_the_op_fuses(act, dtype):
    """A QDQ island after the op (a unary region: one table of ORT's values) fuses too."""
    zps = (128, 120, 130) if dtype == "uint8" else (0, -8, 2)
    m = eltwise_model(activation=act, dtype=dtype, zps=zps, b_shape=(1, 8, 1, 1))
    r, _ = _compile_run(m, seeds=(0, 2))
    (site,) = r.sites
    assert site.pattern.startswith("qlinearadd+") and site.verdict == "proven" and site.applied
    (step,) = _eltwise_steps(r)
    assert step.lut is not None and len(r.lowered.steps) == 1


def test_site_on_a_target_without_the_unit_is_rejected_with_its_reason():
    r, _ = _compile_run(eltwise_model(activation="Sigmoid"), FIXED, seeds=(0,))
    (site,) = r.sites
    assert site.verdict == "rejected" and site.reason.code == "unsupported_eltwise"


def test_operand_roles_that_follow_the_batch_size_stay_on_the_host():
    """[1,1] + [1]: one element (ORT's A-scalar roles) at batch 1, B scalar at batch 2."""
    g, _ = to_ir(eltwise_model(a_shape=(1, 1), b_shape=(1,)))
    (n,) = g.nodes
    assert n.op == "host_onnx" and "depend on the batch size" in n.attrs["placement"]
    (n,) = to_ir(eltwise_model(a_shape=(1, 8, 5, 5), b_shape=(1, 8, 1, 1)))[0].nodes
    assert n.op == "eltwise" and n.attrs["mode"] == "b_scalar"


def test_second_table_in_a_row_is_already_fused():
    r, prog = _compile_run(eltwise_model(activation="Sigmoid2"), seeds=(0,))
    by = {s.activation.name: s for s in r.sites}
    assert by["act"].verdict == "proven"
    assert by["act2"].verdict == "rejected" and by["act2"].reason.code == "already_fused"
    (step,) = _eltwise_steps(r)
    assert step.lut is not None and step.out == "s"  # the first table is fused


@SLOW
def test_npuc_compile_and_run_a_residual_add_equal_onnxruntime(tmp_path):
    """The command line as a user runs it: `npuc compile`, then `npuc run`, then ORT."""
    m = eltwise_model(dtype="int8", zps=(-3, 5, 1), residual_conv=True, a_shape=(1, 8, 6, 6))
    path, prog, inp, out = (tmp_path / n for n in ("m.onnx", "m.npu", "in.npz", "out.npz"))
    onnx.save(m, path)
    feed = random_inputs(m, 2, extremes=True)
    feed["a"][0, 0, 0, :3] = (-128, 0, 127)
    np.savez(inp, **feed)
    c = npuc("compile", path, "-o", prog, "--reference", "ort-host", "--no-progress")
    assert c.returncode == 0, c.stderr
    r = npuc("run", prog, "--input", inp, "-o", out)
    assert r.returncode == 0, r.stderr
    want = session(m, "default").run(None, feed)[0]
    np.testing.assert_array_equal(np.load(out)["c"], want)


@SLOW
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("layout", ["same", "inner"])
def test_every_pair_at_every_vector_lane_and_tail_position(op, layout):
    """Every operand pair at every offset of MLAS's vector bodies and tails: spans of 49
    (the inner broadcast of a 7x7 map) and 33 consecutive copies of each pair (same shape),
    so a kernel whose tail rounds differently from its body would show here."""
    i = np.iinfo("uint8")
    v = np.arange(i.min, i.max + 1, dtype=np.int64)
    va, vb = np.repeat(v, 256), np.tile(v, 256)  # the 65,536 pairs
    if layout == "inner":  # [1, 65536, 7, 7] + [1, 65536, 1, 1]: each pair over a span of 49
        a = np.broadcast_to(va[None, :, None, None], (1, va.size, 7, 7)).copy()
        b = vb.reshape(1, -1, 1, 1)
    else:  # [65536 * 33] + [65536 * 33]
        a, b = np.repeat(va, 33), np.repeat(vb, 33)
    for p in _param_sets("uint8")[3:6]:
        want = _ort(op, a, b, p)
        np.testing.assert_array_equal(qlinear_binary(op, a, b, p, fma=HOST_FMA), want)
