"""Validation: each incomplete or unsupported state is a specific error with a reason code."""

import dataclasses

import pytest
from test_backend_support import N, fused_post, matmul_model, x_input

from npu_backend.codegen import generate
from npu_backend.isa import MatMul, ParamLoad, TableLoad
from npu_backend.lowered import NpuClip, NpuLut, NpuRequant, unfuse
from npu_backend.postprocess import PostProcess, RequantParams
from npu_backend.simulator import SimulatorError, run
from npu_backend.target import load_target
from npu_backend.validate import ValidationError, validate_program, validate_step

FLOAT = load_target()
FIXED = load_target("npu_backend/targets/npu_fixed.toml")


def _step(post, **kw):
    st = matmul_model(post).steps[0]
    return dataclasses.replace(st, **kw)


def _codes(step, target):
    return {i.code for i in validate_step(step, target)}


def test_valid_fused_steps_have_no_issues():
    assert validate_step(_step(fused_post(FLOAT)), FLOAT) == []
    assert validate_step(_step(fused_post(FIXED)), FIXED) == []


def test_lut_without_metadata():
    post = fused_post(FLOAT)
    for bad in (
        dataclasses.replace(post, lut=dataclasses.replace(post.lut, in_type=None)),
        dataclasses.replace(post, lut=dataclasses.replace(post.lut, table=None)),
        dataclasses.replace(post, function=None),
    ):
        issues = validate_step(_step(bad), FLOAT)
        assert [i.code for i in issues] == ["incomplete_parameters"]
        assert "LUT without its metadata" in issues[0].message
    with pytest.raises(ValidationError, match="incomplete_parameters") as e:
        generate(matmul_model(dataclasses.replace(post, function=None)), FLOAT)
    assert e.value.code == "incomplete_parameters"


def test_lut_with_a_bad_function_or_table():
    """Each LUT check alone: unknown function, out-of-range entry, wrong entry count, an
    input type other than the intermediate type (none had a negative test)."""
    post = fused_post(FLOAT)

    def issues(**lut_changes):
        lut = dataclasses.replace(post.lut, **lut_changes)
        return [
            (i.code, i.message)
            for i in validate_step(_step(dataclasses.replace(post, lut=lut)), FLOAT)
        ]

    got = validate_step(_step(dataclasses.replace(post, function="nonsense")), FLOAT)
    assert [(i.code, i.message) for i in got] == [
        ("unsupported_function", "unknown function 'nonsense'")
    ]
    table = list(post.lut.table)
    table[5] = 300
    assert issues(table=tuple(table)) == [
        (
            "incomplete_parameters",
            "LUT entries outside the range of int8; rebuild the table for the LUT",
        )
    ]
    short = issues(table=post.lut.table[:255])
    assert ("incomplete_parameters", "table has 255 entries; table slots hold 256") in short
    assert all(code == "incomplete_parameters" for code, _ in short)
    small = tuple(abs(v) % 128 for v in post.lut.table)  # valid as uint8 and as int8
    assert issues(table=small, in_type="uint8") == [
        (
            "incomplete_parameters",
            "LUT input type 'uint8' differs from the intermediate type 'int8'; rebuild the "
            "table for the intermediate encoding",
        )
    ]
    assert issues(table=small) == []


def test_columns_with_different_tables_and_a_lutless_encoding_change():
    """Per-column epilogues must share one table; without a LUT the output encoding is the
    requantization's (both checks had no negative test)."""
    post = fused_post(FLOAT)
    assert validate_step(_step((post,) * N), FLOAT) == []
    mixed = (post,) * (N - 1) + (fused_post(FLOAT, function="tanh"),)
    got = validate_step(_step(mixed), FLOAT)
    assert [i.code for i in got] == ["incomplete_parameters"]
    assert got[0].message.startswith("columns use different LUTs or functions")
    plain = dataclasses.replace(post, lut=None, function=None)
    assert validate_step(_step(plain), FLOAT) == []
    got = validate_step(_step(dataclasses.replace(plain, out_zp=5)), FLOAT)
    assert [i.code for i in got] == ["incomplete_parameters"]
    assert "without a LUT the output encoding must be the requantization's" in got[0].message


def test_fusion_attributes_without_lut():
    post = dataclasses.replace(fused_post(FLOAT), lut=None)
    issues = validate_step(_step(post), FLOAT)
    assert [i.code for i in issues] == ["incomplete_parameters"]
    assert "without a LUT" in issues[0].message and "clear the function" in issues[0].message


def test_lut_output_encoding_unknown():
    post = fused_post(FLOAT)
    post = dataclasses.replace(post, lut=dataclasses.replace(post.lut, spec=None))
    issues = validate_step(_step(post), FLOAT)
    assert [i.code for i in issues] == ["incomplete_parameters"]
    assert "output zero point" in issues[0].message
    assert validate_step(_step(dataclasses.replace(post, out_zp=-128)), FLOAT) == []


def test_unsupported_intermediate_type():
    rq = RequantParams("float32", 0, "int16", scale=0.01)
    assert _codes(_step(PostProcess(rq)), FLOAT) == {"unsupported_intermediate_type"}
    rq8 = RequantParams("fixed_double", 0, "uint8", multiplier=1 << 30, shift=-8)
    assert _codes(_step(PostProcess(rq8)), FIXED) == {"unsupported_intermediate_type"}
    assert validate_step(_step(PostProcess(dataclasses.replace(rq8, out_type="int8"))), FIXED) == []


def test_grouped_codegen_unsupported():
    # float: fused postprocessing in plain and grouped, not tiled
    assert _codes(_step(fused_post(FLOAT), structure="tiled"), FLOAT) == {
        "grouped_codegen_unsupported"
    }
    assert validate_step(_step(fused_post(FLOAT), structure="grouped"), FLOAT) == []
    # fixed: only plain; the unfused form in a grouped schedule is fine
    fused = _step(fused_post(FIXED), structure="grouped")
    issues = validate_step(fused, FIXED)
    assert [i.code for i in issues] == ["grouped_codegen_unsupported"]
    assert "unfused form" in issues[0].message
    assert all(validate_step(s, FIXED) == [] for s in unfuse(fused))


def test_unsupported_function_depends_on_target():
    tanh_float = _step(fused_post(FLOAT, "tanh"))
    tanh_fixed = _step(fused_post(FIXED, "tanh"))
    assert validate_step(tanh_float, FLOAT) == []
    assert _codes(tanh_fixed, FIXED) == {"unsupported_function"}
    # ... but tanh fuses on the fixed target's Conv unit
    assert validate_step(dataclasses.replace(tanh_fixed, compute="Conv"), FIXED) == []
    # the compiler's fallback: split the site; each part is emitted and runs
    parts = unfuse(tanh_fixed)
    assert all(validate_step(s, FIXED) == [] for s in parts)
    model = matmul_model(fused_post(FIXED, "tanh"))
    model.steps = parts
    out, _ = run(generate(model, FIXED), x_input())
    assert out["y"].dtype.name == "int8"


def test_requantize_the_postprocessor_cannot_reproduce():
    float_post_on_fixed = _step(fused_post(FLOAT))
    codes = _codes(float_post_on_fixed, FIXED)
    assert "intervening_requantize" in codes
    assert _codes(NpuRequant("r", "a", "b", fused_post(FLOAT).requant), FIXED) == {
        "intervening_requantize"
    }


def test_clip_the_postprocessor_cannot_absorb():
    conv = _step(fused_post(FIXED, clip=(-50, 50)), compute="Conv")
    assert _codes(conv, FIXED) == {"intervening_clip"}
    assert validate_step(_step(fused_post(FIXED, clip=(-50, 50))), FIXED) == []
    assert _codes(NpuClip("c", "a", "b", 5, -5, "int8"), FIXED) == {"incomplete_parameters"}


def test_table_in_the_wrong_index_order():
    post_float_order = fused_post(FLOAT, "sigmoid")  # offset order
    step = _step(dataclasses.replace(fused_post(FIXED), lut=post_float_order.lut))
    issues = validate_step(step, FIXED)
    assert [i.code for i in issues] == ["layout_mismatch"]
    assert "reorder_table" in issues[0].message
    lut = post_float_order.lut
    standalone = NpuLut.from_params("a", "x", "y", lut, "sigmoid")
    assert _codes(standalone, FIXED) == {"layout_mismatch"}
    assert validate_step(standalone, FLOAT) == []


def test_table_address_not_yet_allocated():
    prog = generate(matmul_model(fused_post(FLOAT)), FLOAT)
    assert validate_program(prog, FLOAT) == []
    no_load = dataclasses.replace(
        prog, instructions=[i for i in prog.instructions if not isinstance(i, TableLoad)]
    )
    issues = validate_program(no_load, FLOAT)
    assert [i.code for i in issues] == ["incomplete_parameters"]
    assert "not yet allocated" in issues[0].message
    with pytest.raises(SimulatorError, match="never loaded"):
        run(no_load, x_input())
    # a descriptor pointing outside table memory
    bad_addr = dataclasses.replace(
        prog,
        instructions=[
            dataclasses.replace(i, table_slot=99, table_addr=99 * 256)
            if isinstance(i, MatMul)
            else i
            for i in prog.instructions
        ],
    )
    assert "not a table slot" in validate_program(bad_addr, FLOAT)[0].message


def test_table_slot_overwritten_before_use():
    prog = generate(matmul_model(fused_post(FLOAT)), FLOAT)
    other = "table/other"
    consts = dict(prog.constants, **{other: prog.constants[prog.ops(TableLoad)[0].table][::-1]})
    ins = list(prog.instructions)
    k = next(i for i, x in enumerate(ins) if isinstance(x, MatMul))
    ins.insert(k, TableLoad(other, 0, 0, 256))
    clobbered = dataclasses.replace(prog, instructions=ins, constants=consts)
    assert "holds another table" in validate_program(clobbered, FLOAT)[0].message


def test_missing_parameter_record_and_stray_fields():
    prog = generate(matmul_model(fused_post(FLOAT)), FLOAT)
    no_params = dataclasses.replace(
        prog, instructions=[i for i in prog.instructions if not isinstance(i, ParamLoad)]
    )
    assert "ParamLoad" in validate_program(no_params, FLOAT)[0].message
    stray = dataclasses.replace(
        prog,
        instructions=[
            dataclasses.replace(i, post_enable=False) if isinstance(i, MatMul) else i
            for i in prog.instructions
        ],
    )
    issue = validate_program(stray, FLOAT)[0]
    assert issue.code == "incomplete_parameters" and "fusion attributes" in issue.message


def test_per_column_posts_sharing_a_table_each_report_its_issues(monkeypatch):
    """Columns with their own requantization but one `LutParams` (a per-channel site):
    the table is checked once per step, and the step's issues are the ones found when
    every column's postprocessing checks the table itself."""
    import npu_backend.validate as V

    post = fused_post(FLOAT)
    table = list(post.lut.table)
    table[5] = 300
    bad = dataclasses.replace(post.lut, table=tuple(table))
    real_lut = V._lut_issues
    for lut, function in ((bad, post.function), (post.lut, "nonsense"), (post.lut, post.function)):
        posts = tuple(
            dataclasses.replace(
                post,
                lut=lut,
                function=function,
                requant=dataclasses.replace(post.requant, zp=post.requant.zp + j % 3),
            )
            for j in range(N)
        )
        checked: list = []
        monkeypatch.setattr(V, "_lut_issues", lambda *a, c=checked: c.append(a[0]) or real_lut(*a))
        got = validate_step(_step(posts), FLOAT)
        assert len(checked) == 1
        step = _step(posts)
        caps = FLOAT.compute(step.compute)
        alone = [  # each column checked alone: its requantization, then its stages (no memo)
            i
            for q in dict.fromkeys(posts)
            for i in V._requant_issues(q.requant, caps.requant_scheme, step.name)
            + V._stage_issues(q, step, caps, FLOAT, step.compute)
        ]
        assert got == list(dict.fromkeys(alone))  # each column checked alone, no memo
        assert len(checked) == 1 + len(set(posts)) == 4
        assert bool(got) == (lut is bad or function == "nonsense")


def test_per_column_scales_are_each_checked_and_the_rest_once(monkeypatch):
    """Per-channel columns differ in their requantization scale only: each scale is
    checked (one bad scale is reported), the stages after it once per step."""
    import npu_backend.validate as V

    post = fused_post(FLOAT)
    scales = [0.01 * (j + 1) for j in range(N)]
    scales[2] = -1.0
    posts = tuple(
        dataclasses.replace(post, requant=dataclasses.replace(post.requant, scale=s))
        for s in scales
    )
    real_stage = V._stage_issues
    calls: list = []
    monkeypatch.setattr(V, "_stage_issues", lambda *a: calls.append(a[0]) or real_stage(*a))
    got = validate_step(_step(posts), FLOAT)
    assert len(calls) == 1
    assert [i.code for i in got] == ["incomplete_parameters"]
    assert "bad requantization" in got[0].message and "-1.0" in got[0].message
    fine = tuple(p for p in posts if p.requant.scale > 0)
    assert validate_step(_step(fine), FLOAT) == []
