"""Issue 24 deliverable 2: dynamic quantization's integer matmul on the NPU.

A MatMulInteger whose activation zero point is computed at run time (DynamicQuantizeLinear's,
or fed as an input), and ORT's fused com.microsoft MatMulIntegerToFloat /
DynamicQuantizeMatMul, run their exact int32 matmul on the NPU with the zero point read by
the instruction as it runs; the float around it stays on the host as ORT computes it. Each
program is compared with ONNX Runtime bit for bit (the default session, and level off for
the plain ONNX op), at the zero point's extremes, for every type pair ORT runs.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

from compiler.api import compile_model
from compiler.errors import FrontendError
from compiler.frontend.reader import to_ir
from compiler.ort.host import host_diagnostics
from compiler.ort.reference_host import resolve_reference
from npu_backend.codegen import CodegenError, generate
from npu_backend.lowered import LoweredModel, NpuMatMul, TensorSpec
from npu_backend.program import Program
from npu_backend.runner import run_batched
from npu_backend.simulator import run
from npu_backend.target import load_target
from prover.reference import Accumulation

ONNX_T = {np.uint8: TP.UINT8, np.int8: TP.INT8}
MS = "com.microsoft"
ROOT = Path(__file__).resolve().parents[1]
K, N = 32, 6


def _model(nodes, inputs, outputs, inits, ms: bool = False) -> onnx.ModelProto:
    g = oh.make_graph(nodes, "dyn", inputs, outputs, inits)
    ops = [oh.make_opsetid("", 17), *([oh.make_opsetid(MS, 1)] if ms else [])]
    m = oh.make_model(g, opset_imports=ops)
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def _weights(wt, seed: int = 0) -> np.ndarray:
    """Weights spanning their type (both ends present)."""
    info = np.iinfo(wt)
    w = np.random.default_rng(seed).integers(info.min, info.max + 1, (K, N)).astype(wt)
    w[0, 0], w[1, 0] = info.min, info.max
    return w


def zp_input_model(at, wt, a_shape=(4, K), w_zp=None) -> onnx.ModelProto:
    """MatMulInteger(a, W, zp) with the zero point a graph input (any value at run time)."""
    inits = [nh.from_array(_weights(wt), "W")]
    ins = ["a", "W", "zp"]
    if w_zp is not None:
        inits.append(nh.from_array(np.asarray(w_zp, wt), "wz"))
        ins.append("wz")
    return _model(
        [oh.make_node("MatMulInteger", ins, ["y"], name="mmi")],
        [
            oh.make_tensor_value_info("a", ONNX_T[at], list(a_shape)),
            oh.make_tensor_value_info("zp", ONNX_T[at], []),
        ],
        [oh.make_tensor_value_info("y", TP.INT32, [*a_shape[:-1], N])],
        inits,
    )


def dyn_pattern_model(wt=np.int8, bias: bool = True) -> onnx.ModelProto:
    """quantize_dynamic's pattern: DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul
    (a_scale * b_scale) -> Add(bias)."""
    inits = [
        nh.from_array(_weights(wt), "W"),
        nh.from_array(np.array(0.0123, np.float32), "w_scale"),
        nh.from_array(np.array(3 if wt == np.uint8 else 0, wt), "w_zp"),
        nh.from_array(np.linspace(-1, 1, N).astype(np.float32), "bias"),
    ]
    nodes = [
        oh.make_node("DynamicQuantizeLinear", ["x"], ["q", "q_s", "q_z"], name="dql"),
        oh.make_node("Mul", ["q_s", "w_scale"], ["s"], name="scales"),
        oh.make_node("MatMulInteger", ["q", "W", "q_z", "w_zp"], ["acc"], name="mmi"),
        oh.make_node("Cast", ["acc"], ["accf"], to=TP.FLOAT, name="cast"),
        oh.make_node("Mul", ["accf", "s"], ["y" if not bias else "m"], name="scale"),
        *([oh.make_node("Add", ["m", "bias"], ["y"], name="bias")] if bias else []),
    ]
    return _model(
        nodes,
        [oh.make_tensor_value_info("x", TP.FLOAT, [3, 5, K])],
        [oh.make_tensor_value_info("y", TP.FLOAT, [3, 5, N])],
        inits,
    )


def ms_model(op: str, wt, per_column: bool, bias: bool) -> onnx.ModelProto:
    """com.microsoft DynamicQuantizeMatMul(x, ...) or MatMulIntegerToFloat(DQL(x), ...)."""
    rng = np.random.default_rng(1)
    b_scale = (rng.random(N if per_column else 1) * 0.02 + 1e-3).astype(np.float32)
    b_zp = np.full(b_scale.shape, 5 if wt == np.uint8 else 0, wt)
    if not per_column:
        b_scale, b_zp = b_scale.reshape(()), b_zp.reshape(())
    inits = [
        nh.from_array(_weights(wt, 2), "W"),
        nh.from_array(b_scale, "b_scale"),
        nh.from_array(b_zp, "b_zp"),
        nh.from_array(rng.standard_normal(N).astype(np.float32), "bias"),
    ]
    tail = ["bias"] if bias else []
    if op == "DynamicQuantizeMatMul":
        nodes = [oh.make_node(op, ["x", "W", "b_scale", "b_zp", *tail], ["y"], domain=MS, name="m")]
    else:
        nodes = [
            oh.make_node("DynamicQuantizeLinear", ["x"], ["q", "q_s", "q_z"], name="dql"),
            oh.make_node(
                op, ["q", "W", "q_s", "b_scale", "q_z", "b_zp", *tail], ["y"], domain=MS, name="m"
            ),
        ]
    return _model(
        nodes,
        [oh.make_tensor_value_info("x", TP.FLOAT, [6, K])],
        [oh.make_tensor_value_info("y", TP.FLOAT, [6, N])],
        inits,
        ms=True,
    )


def _ort(m: onnx.ModelProto, feeds: dict, level: str = "default") -> dict[str, np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    if level == "off":
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds), strict=True))


# this machine's ORT: on x86 without VNNI its u8s8 pairs saturate int16, and a u8s8 matmul
# whose pairs can saturate then stays on the host (so every comparison holds on any CPU)
HOST = resolve_reference("ort-host")
SATURATES = HOST.u8s8_accumulation == Accumulation.PAIR_SATURATING_INT16
FLOAT_READING = "ort-x86-avx2-qdq-float" if SATURATES else "onnx-qdq-float"


def _on_npu(at, wt) -> int:
    """NPU MatMuls expected for one matmul of these types (its weights span their type)."""
    return 0 if SATURATES and at is np.uint8 and wt is np.int8 else 1


def _program(m: onnx.ModelProto, reference=HOST):
    r = compile_model(m, "bitwise", None, proofs_mode="off", reference=reference)
    return r, generate(r.lowered, load_target(None))


def _equal(program, m: onnx.ModelProto, feeds: dict, levels=("default",)) -> None:
    got, _ = run_batched(program, feeds)
    for level in levels:
        for k, w in _ort(m, feeds, level).items():
            g = np.asarray(got[k])
            assert g.dtype == w.dtype and g.shape == w.shape, k
            assert np.array_equal(g.view(np.uint8), w.view(np.uint8)), (level, k)


def _npu_matmuls(program) -> list:
    return [i for i in program.instructions if type(i).__name__ == "MatMul"]


def _floats(seed: int) -> list[np.ndarray]:
    """Float inputs with every sign mix: centred, all positive (zero point 0), all negative
    (zero point 255), one huge outlier, all zeros."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, 5, K)).astype(np.float32) * 3
    big = x.copy()
    big.reshape(-1)[7] = 1e4
    return [x, np.abs(x), -np.abs(x), big, np.zeros_like(x)]


# --- MatMulInteger with a run-time zero point ---------------------------------------------

PAIRS = [(at, wt) for at in (np.uint8, np.int8) for wt in (np.uint8, np.int8)]


@pytest.mark.parametrize("at,wt", PAIRS, ids=lambda t: t.__name__)
def test_zero_point_fed_at_run_time_runs_on_the_npu_equal_to_ort(at, wt):
    """u8u8, u8s8, s8u8, s8s8 (every pair ORT's MatMulInteger runs): the zero point at both
    ends of its type and in the middle, inputs at their extremes."""
    m = zp_input_model(at, wt, w_zp=7 if wt == np.uint8 else -3)
    g, _ = to_ir(m)
    mm = next(n for n in g.nodes if n.op == "matmul")
    assert mm.attrs["a_zp_input"] == "zp" and mm.inputs == ["a", "zp"]
    _, program = _program(m)
    ins = _npu_matmuls(program)
    assert len(ins) == _on_npu(at, wt)
    assert all(i.a_zp_input == "zp" for i in ins)  # the instruction reads it when it runs
    info = np.iinfo(at)
    rng = np.random.default_rng(0)
    for zp in (info.min, info.max, 0, 1, (int(info.min) + int(info.max)) // 2):
        for a in (
            rng.integers(info.min, info.max + 1, (4, K)).astype(at),
            np.full((4, K), info.min, at),
            np.full((4, K), info.max, at),
        ):
            _equal(program, m, {"a": a, "zp": np.array(zp, at)}, levels=("default", "off"))


@pytest.mark.parametrize("structure", ["plain", "tiled"])
def test_attention_shaped_batch_matmul_with_a_run_time_zero_point(structure):
    """[B, H, S, D] activations by [D, N] weights: every leading axis is a row; streamed
    tile by tile too, and through a saved program."""
    m = zp_input_model(np.uint8, np.uint8, a_shape=(2, 3, 5, K))  # u8u8: exact on every CPU
    low = compile_model(m, "bitwise", None, proofs_mode="off", reference=HOST).lowered
    if structure == "tiled":  # small tiles: 2 column groups, 3 K steps, 6 row tiles
        tile = {"structure": "tiled", "tile": (5, 4, 12)}
        low.steps = [replace(s, **tile) if isinstance(s, NpuMatMul) else s for s in low.steps]
    program = Program.from_bytes(generate(low, load_target(None)).to_bytes())
    ins = _npu_matmuls(program)
    assert all(i.a_zp_input == "zp" for i in ins) and len(ins) == (2 if structure == "tiled" else 1)
    a = np.random.default_rng(3).integers(0, 256, (2, 3, 5, K)).astype(np.uint8)
    for zp in (0, 255, 128):
        _equal(program, m, {"a": a, "zp": np.array(zp, np.uint8)})


def test_dynamic_quantization_pattern_integer_matmul_on_the_npu():
    """The pattern as quantize_dynamic writes it, read as written (float QDQ reading) and as
    ORT's default session runs it (fused to MatMulIntegerToFloat): the integer matmul is one
    NPU MatMul, DynamicQuantizeLinear and the float epilogue stay on the host."""
    for wt in (np.int8, np.uint8):
        m = dyn_pattern_model(wt)
        for ref in (HOST, FLOAT_READING):
            _, program = _program(m, ref)
            assert len(_npu_matmuls(program)) == _on_npu(np.uint8, wt), (wt, ref)
            for x in _floats(0):
                _equal(program, m, {"x": x}, levels=("default", "off"))


@pytest.mark.parametrize("op", ["DynamicQuantizeMatMul", "MatMulIntegerToFloat"])
@pytest.mark.parametrize("per_column", [False, True], ids=["pt", "pc"])
def test_ort_fused_dynamic_matmuls_split_exactly(op, per_column):
    """ORT's fused kernels: their quantization is DynamicQuantizeLinear's and their epilogue
    a float32 multiply then add; the split program equals them bit for bit."""
    for wt, bias in ((np.int8, True), (np.uint8, False)):
        m = ms_model(op, wt, per_column, bias)
        r, program = _program(m)
        assert len(_npu_matmuls(program)) == _on_npu(np.uint8, wt), (op, wt)
        placed = " ".join(d.message for d in host_diagnostics(r.graph))
        assert "float epilogue" in placed
        rng = np.random.default_rng(5)
        for x in [rng.standard_normal((6, K)).astype(np.float32) * s for s in (0.1, 3, 100)]:
            _equal(program, m, {"x": x})
            _equal(program, m, {"x": np.abs(x)})  # zero point 0
            _equal(program, m, {"x": -np.abs(x)})  # zero point 255


# --- negative cases -----------------------------------------------------------------------


def test_zero_point_of_one_element_is_read_a_per_row_one_is_refused():
    """A [1] zero point is one operand of the NPU MatMul; a per-row one ([M, 1], which ONNX
    allows) is refused as ORT refuses it: a one-line error, no program."""
    m = zp_input_model(np.uint8, np.int8)
    m.graph.input[1].CopyFrom(oh.make_tensor_value_info("zp", TP.UINT8, [1]))
    _, program = _program(m)
    assert len(_npu_matmuls(program)) == _on_npu(np.uint8, np.int8)
    a = np.full((4, K), 200, np.uint8)
    _equal(program, m, {"a": a, "zp": np.array([255], np.uint8)})
    m.graph.input[1].CopyFrom(oh.make_tensor_value_info("zp", TP.UINT8, [4, 1]))
    with pytest.raises(FrontendError, match="a_zero_point 'zp' has shape \\[4, 1\\]"):
        to_ir(m)


def test_saturable_u8s8_under_the_avx2_reference_stays_on_the_host():
    """Under ort-x86-avx2 (MLAS's u8s8 pairs saturate int16 without VNNI, whatever the zero
    point) a DynamicQuantizeMatMul whose weights can saturate keeps its integer matmul on
    the host as the MatMulInteger it is (reference_divergence), equal to this host's ORT."""
    m = ms_model("DynamicQuantizeMatMul", np.int8, False, True)
    r, program = _program(m, "ort-x86-avx2")
    assert not _npu_matmuls(program)
    codes = {d.code.value for d in r.diagnostics}
    assert "reference_divergence" in codes, codes
    x = np.random.default_rng(2).standard_normal((6, K)).astype(np.float32)
    _equal(program, m, {"x": x})


def _zp_step_model(zp_dtype: str) -> LoweredModel:
    w = np.ones((K, N), np.int8)
    step = NpuMatMul(
        name="mm", a="a", w="w", out="y", a_zp=0, w_zp=0, bias=None,
        a_type="uint8", w_type="int8", a_zp_input="zp",
    )  # fmt: skip
    return LoweredModel(
        [TensorSpec("a", "uint8", (2, K)), TensorSpec("zp", zp_dtype, ())],
        ["y"],
        {"w": w},
        [step],
    )


def test_a_zero_point_operand_of_another_type_is_refused_by_codegen():
    with pytest.raises(CodegenError, match="zero point 'zp' is int32"):
        generate(_zp_step_model("int32"), load_target(None))


def test_the_instruction_reads_its_zero_point_when_it_runs():
    """Two runs of one program with two zero points: two results, each the exact sum."""
    program = generate(_zp_step_model("uint8"), load_target(None))
    a = np.full((2, K), 9, np.uint8)
    for zp in (0, 255):
        out, _ = run(program, {"a": a, "zp": np.array(zp, np.uint8)})
        assert (np.asarray(out["y"]) == (9 - zp) * K).all()


# --- QLinearMatMul of two activations (attention's Q.K^T and P.V) ---------------------------


def attention_model(at, bt, a_shape=(2, 3, 5, 8), b_shape=(2, 3, 8, 5), then_sigmoid=False):
    """QLinearMatMul(a, b) with both operands graph inputs ([B, H, S, D] x [B, H, D, S]),
    per-tensor scales and zero points, optionally followed by a QLinearSigmoid."""
    y_shape = [*a_shape[:-1], b_shape[-1]]
    zp = {np.uint8: 131, np.int8: -3}
    inits = [
        nh.from_array(np.array(0.05, np.float32), "a_s"),
        nh.from_array(np.array(zp[at], at), "a_z"),
        nh.from_array(np.array(0.031, np.float32), "b_s"),
        nh.from_array(np.array(zp[bt], bt), "b_z"),
        nh.from_array(np.array(0.7, np.float32), "y_s"),
        nh.from_array(np.array(zp[at], at), "y_z"),
    ]
    nodes = [
        oh.make_node(
            "QLinearMatMul",
            ["a", "a_s", "a_z", "b", "b_s", "b_z", "y_s", "y_z"],
            ["y" if not then_sigmoid else "mm"],
            name="scores",
        )
    ]
    if then_sigmoid:
        nodes.append(
            oh.make_node(
                "QLinearSigmoid", ["mm", "y_s", "y_z", "y_s", "y_z"], ["y"], domain=MS, name="sig"
            )
        )
    return _model(
        nodes,
        [
            oh.make_tensor_value_info("a", ONNX_T[at], list(a_shape)),
            oh.make_tensor_value_info("b", ONNX_T[bt], list(b_shape)),
        ],
        [oh.make_tensor_value_info("y", ONNX_T[at], y_shape)],
        inits,
        ms=then_sigmoid,
    )


def _ints(t, shape, rng) -> list[np.ndarray]:
    info = np.iinfo(t)
    return [
        rng.integers(info.min, info.max + 1, shape).astype(t),
        np.full(shape, info.min, t),
        np.full(shape, info.max, t),
    ]


def _ort_runs(m: onnx.ModelProto) -> bool:
    try:
        _ort(m, {})
    except Exception as e:  # noqa: BLE001 - no kernel for these types: not a case
        return "NOT_IMPLEMENTED" not in str(e) and "kernel" not in str(e).lower()
    return True


@pytest.mark.parametrize("at,bt", PAIRS, ids=lambda t: t.__name__)
def test_attention_scores_of_two_activations_run_on_the_npu_equal_to_ort(at, bt):
    """[B, H, S, D] x [B, H, D, S] with both operands run-time: one NPU MatMul reading the
    second from dram, its requantization proven; every type pair ORT's QLinearMatMul runs
    (the others are refused as ORT refuses them)."""
    m = attention_model(at, bt)
    if not _ort_runs(m):
        with pytest.raises(FrontendError, match="no QLinearMatMul kernel"):
            to_ir(m)
        return
    g, _ = to_ir(m)
    assert [n.op for n in g.nodes] == ["matmul_act"]
    r, program = _program(m)
    ins = _npu_matmuls(program)
    assert len(ins) == _on_npu(at, bt) and all(i.w_input and i.w == "b" for i in ins)
    if ins:
        assert not [d for d in r.diagnostics if "scores" in d.nodes]  # nothing on the host
    rng = np.random.default_rng(7)
    for a in _ints(at, (2, 3, 5, 8), rng):
        for b in _ints(bt, (2, 3, 8, 5), rng):
            _equal(program, m, {"a": a, "b": b}, levels=("default", "off"))


def test_context_product_by_a_2d_run_time_operand_and_a_following_table():
    """P [B, H, S, S] by a 2-D run-time V [S, D]; a QLinearSigmoid after it stays a table
    on the NPU (no fusion into a run-time-operand MatMul): the program equals ORT."""
    m = attention_model(np.uint8, np.uint8, (2, 2, 5, 5), (5, 4), then_sigmoid=True)
    r, program = _program(m)
    assert [i for i in _npu_matmuls(program) if i.w_input]
    rng = np.random.default_rng(8)
    for a in _ints(np.uint8, (2, 2, 5, 5), rng):
        _equal(program, m, {"a": a, "b": rng.integers(0, 256, (5, 4)).astype(np.uint8)})


def test_two_activations_u8s8_under_the_avx2_reference_stay_on_the_host():
    """Every int8 value of a run-time b is reachable, so u8s8 pairs can saturate int16 under
    ort-x86-avx2: the QLinearMatMul runs on the host (reference_divergence)."""
    m = attention_model(np.uint8, np.int8)
    r, program = _program(m, "ort-x86-avx2")
    assert not _npu_matmuls(program)
    assert "reference_divergence" in {d.code.value for d in r.diagnostics}
    rng = np.random.default_rng(9)
    a = rng.integers(0, 256, (2, 3, 5, 8)).astype(np.uint8)
    _equal(program, m, {"a": a, "b": rng.integers(-128, 128, (2, 3, 8, 5)).astype(np.int8)})


def test_broadcast_batch_dims_of_two_activations_stay_on_the_host():
    """b's leading dims broadcast against a's ([2, 1, D, S] vs [2, 3, S, D]): no NPU form,
    the QLinearMatMul runs on the host and the program equals ORT."""
    m = attention_model(np.uint8, np.uint8, (2, 3, 5, 8), (2, 1, 8, 5))
    g, _ = to_ir(m)
    assert not any(n.op == "matmul_act" for n in g.nodes)
    assert any("broadcast" in d.message for d in host_diagnostics(g))
    _, program = _program(m)
    rng = np.random.default_rng(10)
    a = rng.integers(0, 256, (2, 3, 5, 8)).astype(np.uint8)
    _equal(program, m, {"a": a, "b": rng.integers(0, 256, (2, 1, 8, 5)).astype(np.uint8)})


def test_codegen_refuses_a_run_time_operand_whose_accumulator_can_leave_int32():
    step = NpuMatMul(
        name="mm", a="a", w="b", out="y", a_zp=0, w_zp=-128, bias=None,
        a_type="uint8", w_type="int8", w_input=True,
    )  # fmt: skip
    k = 70000  # 70000 * 255 * 255 > 2^31
    low = LoweredModel(
        [TensorSpec("a", "uint8", (1, k)), TensorSpec("b", "int8", (k, 1))], ["y"], {}, [step]
    )
    with pytest.raises(CodegenError, match="may leave int32"):
        generate(low, load_target(None))


def test_two_activations_u8s8_is_a_reference_divergence_finding():
    """Under the exact default reference the u8s8 product is on the NPU, and the report says
    where ORT on x86 without VNNI computes something else (a row of 255s by -128s)."""
    m = attention_model(np.uint8, np.int8)
    r = compile_model(m, "bitwise", None, proofs_mode="off")
    (f,) = [f for f in r.context.findings if f["code"] == "reference_divergence"]
    assert f["nodes"] == ["scores"] and f["saturating_acc"] != f["exact_acc"]
    a = np.full((1, 8), 255, np.uint8)
    b = np.full((8, 1), -128, np.int8)
    want = int(((a.astype(np.int64) - 131) @ (b.astype(np.int64) + 3))[0, 0])
    assert f["exact_acc"] == want
    m2 = attention_model(np.uint8, np.uint8)
    r2 = compile_model(m2, "bitwise", None, proofs_mode="off")
    assert not [f for f in r2.context.findings if f["code"] == "reference_divergence"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny_bert__dyn_u8s8_pt", "tiny_bert__qdq_u8s8_pt"])
def test_npuc_runs_a_small_transformer_equal_to_ort(name, tmp_path):
    """`npuc compile` then `npuc run` on the committed tiny BERT (token ids and mask as
    int64), bit for bit ORT's default session; its integer matmuls are NPU MatMuls."""
    from cli_helpers import npuc

    model = ROOT / "examples" / "zoo" / "small" / f"{name}.onnx"
    prog = tmp_path / "m.npu"
    # this host's reference: on x86 without VNNI a saturable u8s8 matmul stays on the host
    r = npuc("compile", model, "-o", prog, "--proofs-mode", "off", "--reference", "ort-host")
    assert r.returncode == 0, r.stderr
    rng = np.random.default_rng(0)
    feeds = {
        "input_ids": rng.integers(0, 64, (1, 8)).astype(np.int64),
        "attention_mask": np.array([[1, 1, 1, 1, 1, 1, 0, 0]], np.int64),
    }
    np.savez(tmp_path / "in.npz", **feeds)
    r = npuc("run", prog, "--input", tmp_path / "in.npz", "-o", tmp_path / "out.npz")
    assert r.returncode == 0, r.stderr
    program = Program.load(prog)
    assert len(_npu_matmuls(program)) >= (6 if not SATURATES else 0)
    with np.load(tmp_path / "out.npz") as z:
        for k, w in _ort(onnx.load(str(model)), feeds).items():
            assert np.array_equal(z[k].view(np.uint8), w.view(np.uint8)), k


@pytest.mark.parametrize("wt", [np.uint8, np.int8], ids=lambda t: t.__name__)
def test_conv_integer_with_a_run_time_zero_point_pads_with_it(wt):
    """ViT's patch embedding after quantize_dynamic: ConvInteger(x, W, zp) with the zero point
    computed at run time; a 3x3 window with padding, which reads that zero point."""
    rng = np.random.default_rng(11)
    info = np.iinfo(wt)
    w = rng.integers(info.min, info.max + 1, (4, 3, 3, 3)).astype(wt)
    m = _model(
        [oh.make_node("ConvInteger", ["x", "W", "zp"], ["y"], pads=[1, 1, 1, 1], name="conv")],
        [
            oh.make_tensor_value_info("x", TP.UINT8, [1, 3, 6, 6]),
            oh.make_tensor_value_info("zp", TP.UINT8, []),
        ],
        [oh.make_tensor_value_info("y", TP.INT32, [1, 4, 6, 6])],
        [nh.from_array(w, "W")],
    )
    g, _ = to_ir(m)
    assert next(n for n in g.nodes if n.op == "matmul").attrs["a_zp_input"] == "zp"
    _, program = _program(m)
    assert all(i.a_zp_input == "zp" for i in _npu_matmuls(program))
    assert len(_npu_matmuls(program)) == (1 if wt is np.uint8 or not SATURATES else 0)
    for zp in (0, 255, 77):
        for x in _ints(np.uint8, (1, 3, 6, 6), rng):
            _equal(program, m, {"x": x, "zp": np.array(zp, np.uint8)}, levels=("default", "off"))
