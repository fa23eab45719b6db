"""Code generation: instruction order, descriptors, table reuse and slot exhaustion."""

import dataclasses

import numpy as np
import pytest
from test_backend_support import (
    K,
    fused_post,
    matmul_chain,
    matmul_model,
    requant_post,
    weights,
    x_input,
)

from npu_backend.codegen import CodegenError, generate
from npu_backend.isa import Activation, MatMul, ParamLoad, TableLoad
from npu_backend.lowered import LoweredModel, NpuLut, TensorSpec, unfuse_model
from npu_backend.simulator import run
from npu_backend.target import load_target
from npu_backend.validate import validate_program
from prover.lut import build_lut
from prover.matmul import matmul_acc

FLOAT = load_target()
FIXED = load_target("npu_backend/targets/npu_fixed.toml")


def _kinds(prog):
    return [type(i).__name__ for i in prog.instructions]


def test_fused_matmul_descriptor_and_load_order():
    post = fused_post(FLOAT)
    prog = generate(matmul_model(post), FLOAT)
    kinds = _kinds(prog)
    mm_at = kinds.index("MatMul")
    assert kinds.index("TableLoad") < mm_at and kinds.index("ParamLoad") < mm_at
    assert "Activation" not in kinds
    (mm,) = prog.ops(MatMul)
    (tl,) = prog.ops(TableLoad)
    (pl,) = prog.ops(ParamLoad)
    assert mm.post_enable and mm.function == "sigmoid"
    assert (mm.table_slot, mm.table_addr) == (tl.slot, tl.addr)
    assert mm.param_addr == pl.addr and pl.post.lut.table is None  # record holds no table
    assert mm.intermediate_type == "int8" and (mm.out_type, mm.out_zp) == ("int8", -128)
    assert tuple(prog.constants[tl.table]) == post.lut.table


def test_unfused_has_standalone_activation_and_no_table_on_matmul():
    fused_model = matmul_model(fused_post(FLOAT))
    prog = generate(unfuse_model(fused_model), FLOAT)
    kinds = _kinds(prog)
    (mm,) = prog.ops(MatMul)
    assert mm.function is None and mm.table_slot is None and mm.table_addr is None
    # the only table load serves the standalone activation, after the MatMul
    assert kinds.index("MatMul") < kinds.index("TableLoad") < kinds.index("Activation")
    # fusing removes the activation instruction
    assert "Activation" not in _kinds(generate(fused_model, FLOAT))


def test_raw_accumulator_matmul_has_no_postprocessing_loads():
    prog = generate(matmul_model(None), FLOAT)
    (mm,) = prog.ops(MatMul)
    assert not mm.post_enable and mm.param_addr is None and mm.out_type == "int32"
    assert not prog.ops(TableLoad) and not prog.ops(ParamLoad)
    req = generate(matmul_model(requant_post(FLOAT)), FLOAT)
    assert not req.ops(TableLoad) and len(req.ops(ParamLoad)) == 1


def _chain(posts):
    """x -> mm0 -> mm1 -> ... with square K x K weights; each post produces int8."""
    return matmul_chain([weights(seed=i, n=K)[0] for i in range(len(posts))], posts)


def _reference(model, x):
    v = x
    for st in model.steps:
        v = st.post.apply(matmul_acc(v, model.constants[st.w], st.a_zp, st.w_zp))
    return v


def test_identical_tables_loaded_once():
    post = fused_post(FLOAT)
    model = _chain([post, dataclasses.replace(post, requant=requant_post(FLOAT, 0.01, 0).requant)])
    prog = generate(model, FLOAT)
    assert len(prog.ops(TableLoad)) == 1
    a, b = prog.ops(MatMul)
    assert a.table_slot == b.table_slot
    x = x_input()["x"]
    out, c = run(prog, {"x": x})
    assert c.table_loads == 1
    assert np.array_equal(out["y1"], _reference(model, x))


def test_slot_exhaustion_reloads_without_overwriting_needed_tables():
    # 6 distinct tables cycled twice on a target with 4 slots.
    scales = [0.02, 0.03, 0.04, 0.05, 0.06, 0.07]
    posts = []
    for s in scales * 2:
        spec = FIXED.lut_spec("sigmoid", s, 0, "int8", 1 / 256, -128, "int8")
        base = fused_post(FIXED, scale=0.004, zp=0)
        lut = dataclasses.replace(base.lut, table=tuple(int(v) for v in build_lut(spec)), spec=spec)
        posts.append(dataclasses.replace(base, lut=lut))
    model = _chain(posts)
    prog = generate(model, FIXED)
    loads = prog.ops(TableLoad)
    assert all(0 <= t.slot < FIXED.tables.slots for t in loads)
    assert 6 < len(loads) < 12  # some reuse, some reloads
    assert validate_program(prog, FIXED) == []
    x = x_input()["x"]
    out, c = run(prog, {"x": x})
    assert c.table_loads == len(loads)
    assert np.array_equal(out[model.outputs[0]], _reference(model, x))
    # with plenty of slots every table is loaded exactly once
    roomy = dataclasses.replace(FIXED, tables=dataclasses.replace(FIXED.tables, slots=8))
    assert len(generate(model, roomy).ops(TableLoad)) == 6


def test_standalone_luts_share_tables():
    post = fused_post(FLOAT)
    lut = post.lut
    steps = [
        NpuLut.from_params("a0", "x", "y0", lut, "sigmoid"),
        NpuLut.from_params("a1", "y0", "y1", lut, "sigmoid"),
    ]
    model = LoweredModel([TensorSpec("x", "int8", (3, 5))], ["y1"], {}, steps)
    prog = generate(model, FLOAT)
    assert len(prog.ops(TableLoad)) == 1 and len(prog.ops(Activation)) == 2
    x = np.arange(-128, 127, 17, dtype=np.int8)[:15].reshape(3, 5)
    out, _ = run(prog, {"x": x})
    t = np.asarray(lut.table)
    assert np.array_equal(out["y1"], t[t[x.astype(int) + 128] + 128])


def test_codegen_errors():
    model = matmul_model(None)
    bad_shape = LoweredModel(
        [TensorSpec("x", "int8", (4, K + 1))], ["y"], model.constants, model.steps
    )
    with pytest.raises(CodegenError, match="do not multiply"):
        generate(bad_shape, FLOAT)
    missing = LoweredModel(model.inputs, ["nope"], model.constants, model.steps)
    with pytest.raises(CodegenError, match="never produced"):
        generate(missing, FLOAT)
    # larger than sram: tiled where the target can tile it, refused where it cannot
    big = LoweredModel([TensorSpec("x", "int8", (1 << 20, K))], ["y"], model.constants, model.steps)
    assert {m.structure for m in generate(big, FIXED).ops(MatMul)} == {"tiled"}
    fused = matmul_model(fused_post(FIXED))
    big_fused = LoweredModel(
        [TensorSpec("x", "int8", (1 << 20, K))], ["y"], fused.constants, fused.steps
    )
    with pytest.raises(CodegenError, match="cannot be generated in the 'tiled' structure"):
        generate(big_fused, FIXED)
    per_col = matmul_model((requant_post(FLOAT),) * 3)
    with pytest.raises(CodegenError, match="3 column epilogues for 8"):
        generate(per_col, FLOAT)


def test_operand_checks():
    model = matmul_model(None)
    st = model.steps[0]
    wrong_type = LoweredModel(
        model.inputs, ["y"], model.constants, [dataclasses.replace(st, a_type="uint8")]
    )
    with pytest.raises(CodegenError, match="expects uint8"):
        generate(wrong_type, FLOAT)
    bad_zp = LoweredModel(model.inputs, ["y"], model.constants, [dataclasses.replace(st, a_zp=200)])
    with pytest.raises(CodegenError, match="zero point"):
        generate(bad_zp, FLOAT)
    # K = 140000 int8 products can leave int32: refused, never wrapped
    big_k = LoweredModel(
        [TensorSpec("x", "int8", (1, 140000))],
        ["y"],
        {"w": np.full((140000, 1), 127, np.int8)},
        [dataclasses.replace(st, a_zp=0, bias=None, post=None)],
    )
    with pytest.raises(CodegenError, match="exceeds int32"):
        generate(big_k, FLOAT)
    # the IR's narrow weights (int16 holding 8-bit codes) are checked as they are, with the
    # same answer; values outside the operand type and non-integer weights are refused
    for dtype in (np.int16, np.int32, np.int64):
        wide = dataclasses.replace(big_k, constants={"w": np.full((140000, 1), 127, dtype)})
        with pytest.raises(CodegenError, match="exceeds int32"):
            generate(wide, FLOAT)
    fits = dataclasses.replace(big_k, constants={"w": np.full((140000, 1), 1, np.int16)})
    generate(fits, FLOAT)  # 140000 * 1 * 255 fits int32
    # the same weights' answer is kept by the operands themselves: a bias that pushes the
    # range out of int32, or another input zero point, is asked about anew
    w1 = fits.constants["w"]
    for bias, ok in ((np.array([2**31 - 1], np.int32), False), (np.array([0], np.int32), True)):
        biased = dataclasses.replace(
            fits,
            constants={"w": w1, "b": bias},
            steps=[dataclasses.replace(fits.steps[0], bias="b")],
        )
        if ok:
            generate(biased, FLOAT)
        else:
            with pytest.raises(
                CodegenError, match=r"mm accumulator range .* exceeds int32; the NPU"
            ):
                generate(biased, FLOAT)
    low_zp = dataclasses.replace(fits, steps=[dataclasses.replace(fits.steps[0], a_zp=127)])
    generate(low_zp, FLOAT)  # (x - 127) * 1 over 140000: in int32 as well
    outside = dataclasses.replace(fits, constants={"w": np.full((140000, 1), 128, np.int16)})
    with pytest.raises(CodegenError, match="weights outside int8"):
        generate(outside, FLOAT)
    floats = dataclasses.replace(fits, constants={"w": np.full((140000, 1), 1.0, np.float32)})
    with pytest.raises(CodegenError, match="not integers"):
        generate(floats, FLOAT)
