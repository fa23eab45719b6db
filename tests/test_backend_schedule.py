"""Tiled MatMuls: schedule choice, the per-tile column invariant, bit-exact tiled execution."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from test_backend_support import fused_post, lut_params, requant_post

from npu_backend.codegen import CodegenError, check_column_tiles, generate
from npu_backend.isa import MatMul, ParamLoad
from npu_backend.lowered import LoweredModel, NpuMatMul, TensorSpec, unfuse_model
from npu_backend.postprocess import PostProcess
from npu_backend.program import Program
from npu_backend.schedule import choose_schedule
from npu_backend.simulator import SimulatorError, run
from npu_backend.target import TargetError, load_target, parse_target, requant_from_scale

FLOAT = load_target()
FIXED = load_target("npu_backend/targets/npu_fixed.toml")


def tiling_target(base=FLOAT, **memories: int):
    """`base` with fused postprocessing allowed in the tiled structure and smaller memories."""
    mm = base.compute("MatMul")
    assert mm is not None
    caps = dataclasses.replace(mm, fused_structures=mm.fused_structures | {"tiled"})
    mems = tuple((m, memories.get(m, size)) for m, size in base.memories)
    computes = tuple(caps if c.op == "MatMul" else c for c in base.computes)
    return dataclasses.replace(base, computes=computes, memories=mems)


def per_channel_post(target, n: int, lut: bool, seed: int = 0):
    """One distinct requantizer per column (scales spread over a factor of 3)."""
    scheme = target.compute("MatMul").requant_scheme
    rng = np.random.default_rng(seed)
    scales = 0.0005 * (1 + 2 * rng.random(n))
    zps = rng.integers(-5, 6, n)
    table = lut_params(target) if lut else None
    return tuple(
        PostProcess(
            requant_from_scale(float(s), int(z), "int8", scheme),
            function="sigmoid" if lut else None,
            lut=table,
        )
        for s, z in zip(scales, zps, strict=True)
    )


def model(post, m: int, k: int, n: int, seed: int = 1, tile=None, w_zp=0) -> LoweredModel:
    rng = np.random.default_rng(seed)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    b = rng.integers(-3000, 3000, n).astype(np.int32)
    step = NpuMatMul(
        name="mm",
        a="x",
        w="w",
        out="y",
        a_zp=3,
        w_zp=w_zp,
        bias="b",
        a_type="int8",
        w_type="int8",
        post=post,
        tile=tile,
    )
    return LoweredModel([TensorSpec("x", "int8", (m, k))], ["y"], {"w": w, "b": b}, [step])


def x_of(m: int, k: int, seed: int = 5) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).integers(-128, 128, (m, k)).astype(np.int8)}


# --- target ----------------------------------------------------------------------------


def _data(target_path="npu_backend/targets/npu_float.toml"):
    import tomllib

    return tomllib.loads(Path(target_path).read_text())


def test_schedule_section_is_optional_and_parsed():
    data = _data()
    assert parse_target(data).schedule == FLOAT.schedule
    del data["schedule"]
    default = parse_target(data).schedule
    assert default.mac_m > 0 and default.bandwidth("dram") > 0
    data = _data()
    data["schedule"]["mac_array"] = [8, 32, 128]
    data["schedule"]["dma_overlap"] = False
    data["schedule"]["dma_bytes_per_cycle"]["dram"] = 4
    s = parse_target(data).schedule
    assert (s.mac_m, s.mac_n, s.mac_k, s.dma_overlap, s.bandwidth("dram")) == (
        8,
        32,
        128,
        False,
        4,
    )


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.update(mac_array=[16, 16]), "mac_array"),
        (lambda s: s.update(mac_array=[16, 0, 4]), "mac_array"),
        (lambda s: s.update(cycles_per_mac_block=0), "cycles_per_mac_block = 0"),
        (lambda s: s.update(launch_cycles=-1), "launch_cycles = -1"),
        (lambda s: s.update(dma_overlap="yes"), "expected a boolean"),
        (lambda s: s.update(warp_speed=9), "unknown key"),
        (lambda s: s["dma_bytes_per_cycle"].update(dram=0), "dram = 0"),
        (lambda s: s["dma_bytes_per_cycle"].update(l2=8), "unknown key"),
    ],
)
def test_bad_schedule_values_are_one_line_target_errors(edit, message):
    data = _data()
    edit(data["schedule"])
    with pytest.raises(TargetError, match=message) as e:
        parse_target(data)
    assert "\n" not in str(e.value)


# --- schedule choice and the column invariant -------------------------------------------


def test_resident_when_it_fits_tiled_when_it_does_not():
    small = tiling_target(sram=8192, wmem=4096)
    m = model(fused_post(FLOAT), 64, 256, 40)
    (mm,) = generate(m, FLOAT).ops(MatMul)
    assert mm.structure == "plain" and mm.tile is None and mm.cols is None
    mms = generate(m, small).ops(MatMul)
    assert {i.structure for i in mms} == {"tiled"} and len(mms) >= 1
    sch = choose_schedule(m.steps[0], (64, 256), 40, False, small)
    assert sch.tiled and sch.tiles() > 1
    # a target that cannot tile fused postprocessing refuses instead
    with pytest.raises(CodegenError, match="'tiled' structure"):
        generate(m, dataclasses.replace(FLOAT, memories=small.memories))


def test_each_column_tile_carries_exactly_its_columns_parameters():
    n = 37  # not a multiple of the tile
    post = per_channel_post(FLOAT, n, lut=True)
    m = model(post, 9, 50, n, tile=(4, 8, 16), w_zp=tuple(range(-3, n - 3)))
    prog = generate(m, tiling_target())
    mms = prog.ops(MatMul)
    assert [i.cols for i in mms] == [(a, min(a + 8, n)) for a in range(0, n, 8)]
    for ins in mms:
        n0, n1 = ins.cols
        assert ins.post == post[n0:n1] and ins.w_zp == tuple(range(n0 - 3, n1 - 3))
    # one parameter record per column tile, each of exactly its columns
    records = {p.addr: p.post for p in prog.ops(ParamLoad)}
    for ins in mms:
        assert len(records[ins.param_addr]) == ins.cols[1] - ins.cols[0]


def test_the_column_invariant_rejects_a_tile_with_another_tiles_parameters():
    n = 20
    post = per_channel_post(FLOAT, n, lut=False)
    m = model(post, 4, 16, n, tile=(4, 8, 16))
    st = m.steps[0]
    sch = choose_schedule(st, (4, 16), n, True, FLOAT)
    mms = generate(m, FLOAT).ops(MatMul)
    check_column_tiles(st, sch, mms)  # as emitted: fine
    # the classic bug: the second tile uses the first tile's per-channel scales
    shifted = [mms[0], dataclasses.replace(mms[1], post=post[0:8]), mms[2]]
    with pytest.raises(CodegenError, match=r"\[8, 16\) carries the epilogue of other columns"):
        check_column_tiles(st, sch, shifted)
    with pytest.raises(CodegenError, match="cover 16 of 20"):
        check_column_tiles(st, sch, mms[:2])
    with pytest.raises(CodegenError, match="does not continue"):
        check_column_tiles(st, sch, [mms[0], mms[2]])


def test_the_column_invariant_rejects_a_tile_with_another_tiles_weight_zero_points():
    n = 20
    m = model(
        per_channel_post(FLOAT, n, lut=False), 4, 16, n, tile=(4, 8, 16), w_zp=tuple(range(n))
    )
    st = m.steps[0]
    sch = choose_schedule(st, (4, 16), n, True, FLOAT)
    mms = generate(m, FLOAT).ops(MatMul)
    check_column_tiles(st, sch, mms)  # as emitted: fine
    shifted = [mms[0], dataclasses.replace(mms[1], w_zp=tuple(range(8))), mms[2]]
    with pytest.raises(CodegenError, match=r"\[8, 16\) carries the weight zero points"):
        check_column_tiles(st, sch, shifted)


def test_the_simulator_rejects_tiled_columns_computed_twice_or_left_out():
    n = 20
    m = model(per_channel_post(FLOAT, n, lut=False), 4, 16, n, tile=(4, 8, 16))
    prog = generate(m, FLOAT)
    run(prog, x_of(4, 16))  # as emitted: fine
    k = next(i for i, ins in enumerate(prog.instructions) if isinstance(ins, MatMul))
    twice = [*prog.instructions[: k + 1], *prog.instructions[k:]]
    with pytest.raises(SimulatorError, match=r"columns \(0, 8\) of 'y' computed twice"):
        run(dataclasses.replace(prog, instructions=twice), x_of(4, 16))
    last = max(i for i, ins in enumerate(prog.instructions) if isinstance(ins, MatMul))
    short = [ins for i, ins in enumerate(prog.instructions) if i != last]  # columns 16..20
    with pytest.raises(SimulatorError, match=r"tiled output\(s\) \['y'\] were left incomplete"):
        run(dataclasses.replace(prog, instructions=short), x_of(4, 16))


# --- bit-exact tiled execution -----------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_tiled_equals_untiled_on_random_models(seed):
    rng = np.random.default_rng(seed)
    m, k, n = (int(v) for v in rng.integers(1, 70, 3))
    target = FLOAT if seed % 2 else FIXED
    kind = seed % 3
    if kind == 0:
        post = per_channel_post(target, n, lut=seed % 2 == 1, seed=seed)
    elif kind == 1:
        post = fused_post(target, scale=0.0007)
    else:
        post = requant_post(target, scale=0.0007)
    tile = tuple(int(v) for v in rng.integers(1, 24, 3))
    allowing = tiling_target(target)
    plain = model(post, m, k, n, seed=seed)
    tiled = model(post, m, k, n, seed=seed, tile=tile)
    x = x_of(m, k, seed)
    want, _ = run(generate(plain, allowing), x)
    prog = generate(tiled, allowing)
    assert {i.structure for i in prog.ops(MatMul)} == {"tiled"}
    got, c = run(prog, x)
    np.testing.assert_array_equal(got["y"], want["y"])
    assert got["y"].dtype == want["y"].dtype
    assert c.matmul_tiles >= -(-m // tile[0]) * -(-n // tile[1]) * -(-k // tile[2])
    # and the program file round-trips the tiling
    again = Program.from_bytes(prog.to_bytes())
    np.testing.assert_array_equal(run(again, x)[0]["y"], want["y"])


def test_raw_accumulator_tiled_over_k_equals_the_exact_sum():
    m = model(None, 5, 300, 11, tile=(2, 4, 7))
    x = x_of(5, 300)
    got, _ = run(generate(m, FLOAT), x)
    want = (x["x"].astype(np.int64) - 3) @ m.constants["w"].astype(np.int64) + m.constants["b"]
    np.testing.assert_array_equal(got["y"], want)


def test_untiled_program_bytes_do_not_mention_tiling():
    prog = generate(model(fused_post(FLOAT), 4, 16, 8), FLOAT)
    assert b'"tile"' not in prog.to_bytes() and b'"cols"' not in prog.to_bytes()


def test_tiled_output_feeds_a_later_npu_step():
    """A tiled MatMul leaves its result in dram; the unfused activation after it reads it."""
    post = fused_post(FLOAT, scale=0.0007)
    fused = model(post, 6, 40, 13, tile=(4, 8, 16))
    split = unfuse_model(fused)
    x = x_of(6, 40)
    a, _ = run(generate(fused, tiling_target()), x)
    b, _ = run(generate(split, tiling_target()), x)
    np.testing.assert_array_equal(a["y"], b["y"])


# --- counters and cycles -----------------------------------------------------------------


def test_rereads_peaks_and_cycles_follow_the_schedule():
    m_, k, n = 32, 64, 32
    base = model(requant_post(FLOAT), m_, k, n)
    x = x_of(m_, k)
    _, plain = run(generate(base, FLOAT), x)
    assert plain.weight_reread_bytes == plain.input_reread_bytes == 0
    # 4 column tiles: the input is read 4 times; 2 row tiles: streamed weights twice
    tiled = model(requant_post(FLOAT), m_, k, n, tile=(16, 8, 16))
    streaming = tiling_target(wmem=512)  # too small to keep a [K, 8] block: no stationary
    _, c = run(generate(tiled, streaming), x, target=streaming)
    assert c.input_reread_bytes == 3 * m_ * k
    # the second row tile reads every weight (and the int32 bias) again
    assert c.weight_reread_bytes == k * n + 4 * n
    assert c.matmul_tiles == 2 * 4 * 4
    assert 0 < c.peak_bytes["sram"] <= streaming.memory_size("sram")
    assert 0 < c.peak_bytes["wmem"] <= 512
    # stationary weights: read once
    roomy = tiling_target()
    _, s = run(generate(tiled, roomy), x, target=roomy)
    assert s.weight_reread_bytes == 0 and s.input_reread_bytes == 3 * m_ * k
    # overlap: a tile costs max(compute, dma) instead of the sum
    no_overlap = dataclasses.replace(
        streaming, schedule=dataclasses.replace(streaming.schedule, dma_overlap=False)
    )
    prog = generate(tiled, streaming)
    _, slow = run(prog, x, target=no_overlap)
    assert slow.cycles > c.cycles
    assert slow.cycles_by_opcode["MatMul"] > c.cycles_by_opcode["MatMul"]
    assert sum(i.cycles for i in c.per_instruction) == c.cycles
    assert [i.opcode for i in c.per_instruction] == [type(i).__name__ for i in prog.instructions]


def test_cycle_model_of_a_plain_matmul_is_the_documented_formula():
    t = FLOAT
    s = t.schedule
    m_, k, n = 20, 100, 33
    prog = generate(model(requant_post(t), m_, k, n), t)
    _, c = run(prog, x_of(m_, k), target=t)
    mac = -(-m_ // s.mac_m) * -(-n // s.mac_n) * -(-k // s.mac_k) * s.cycles_per_mac_block
    post = -(-(m_ * n) // s.mac_n)
    assert c.cycles_by_opcode["MatMul"] == s.launch_cycles + mac + post
    (pl,) = prog.ops(ParamLoad)
    assert c.cycles_by_opcode["ParamLoad"] == s.launch_cycles + s.param_load_cycles + -(
        -pl.nbytes // min(s.bandwidth("dram"), s.bandwidth("pmem"))
    )


# --- a model larger than sram, end to end against ONNX Runtime ------------------------------


def _small_target_file(tmp_path, sram: int, wmem: int):
    text = Path(FLOAT.path).read_text()
    for mem, size in (("sram", sram), ("wmem", wmem)):
        old = f"[memories.{mem}]\nsize = {FLOAT.memory_size(mem)}\n"
        assert old in text
        text = text.replace(old, f"[memories.{mem}]\nsize = {size}\n")
    old = 'fused_structures = ["plain", "grouped"]'
    assert old in text
    text = text.replace(old, 'fused_structures = ["plain", "grouped", "tiled"]', 1)
    p = tmp_path / "small_tiles.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("per_channel", [False, True])
def test_a_model_larger_than_sram_is_tiled_and_equals_onnx_runtime(tmp_path, per_channel):
    """QLinearMatMul -> QLinearSigmoid with 256x100 int8 weights (25600 bytes) on a target
    with 16 KiB of sram and 8 KiB of wmem: compiled fused and tiled, output bitwise ORT's."""
    import onnx
    from cli_helpers import assert_run_equals_ort, npuc
    from models import matmul_activation

    k, n, m_ = 256, 100, 24
    small = _small_target_file(tmp_path, sram=16384, wmem=8192)
    onnx_model = matmul_activation(K=k, N=n, M=m_, per_channel=per_channel, w_scale=0.002)
    path = tmp_path / "big.onnx"
    onnx.save(onnx_model, path)
    prog_path = tmp_path / "big.npuprog"
    r = npuc(
        "compile", path, "-o", prog_path, "--target", small, "--reference", "ort-host",
        "--policy", "bitwise", "--proofs-mode", "off",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "1 of 1 candidate fusion applied" in r.stdout, r.stdout
    prog = Program.load(prog_path)
    mms = prog.ops(MatMul)
    assert mms and all(i.structure == "tiled" and i.post_enable for i in mms)
    assert mms[-1].cols[1] == n and (len(mms) > 1 or mms[0].tile[2] < k)
    assert "Activation" not in [type(i).__name__ for i in prog.instructions]  # still fused
    x = np.random.default_rng(3).integers(-128, 128, (m_, k)).astype(np.int8)
    inputs = {onnx_model.graph.input[0].name: x}
    np.savez(tmp_path / "in.npz", **inputs)
    assert_run_equals_ort(prog_path, tmp_path / "in.npz", path, inputs, tmp_path / "out.npz")


def test_a_shipped_example_tiled_equals_onnx_runtime(tmp_path):
    """The per-channel digits classifier on a target too small for its 64x64 and 64x32
    weights: those layers tiled (still fused), the batch's outputs bitwise ORT's."""
    from cli_helpers import REPO, assert_run_equals_ort, npuc

    model = REPO / "examples" / "digits" / "digits_matmul_qop_s8s8_pc.onnx"
    small = _small_target_file(tmp_path, sram=4096, wmem=1536)
    x = np.load(REPO / "examples" / "digits" / "digits_test.npz")["input"][:40]
    np.savez(tmp_path / "float.npz", input=x)
    prog_path = tmp_path / "digits.npuprog"
    r = npuc(
        "compile", model, "-o", prog_path, "--target", small, "--reference", "ort-host",
        "--proofs-mode", "off", "--timeout", "120",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    prog = Program.load(prog_path)
    mms = prog.ops(MatMul)
    tiled = [i for i in mms if prog.constants[i.w].nbytes > 1536]
    assert len({i.name for i in tiled}) == 2  # the 64x64 and 64x32 layers, both fused
    assert all(i.structure == "tiled" and i.function == "sigmoid" for i in tiled)
    r = npuc("inputs", model, "-o", tmp_path / "in.npz", "--from", tmp_path / "float.npz")
    assert r.returncode == 0, r.stderr
    assert_run_equals_ort(prog_path, tmp_path / "in.npz", model, {"input": x}, tmp_path / "out.npz")


def test_validate_program_rejects_inconsistent_tile_fields():
    from npu_backend.validate import validate_program

    n = 20
    post = per_channel_post(FLOAT, n, lut=False)
    target = tiling_target()
    prog = generate(model(post, 4, 16, n, tile=(4, 8, 16)), target)
    assert validate_program(prog, target) == []
    k = next(j for j, i in enumerate(prog.instructions) if isinstance(i, MatMul))
    first = prog.instructions[k]
    for change, msg in (
        ({"cols": (0, 9)}, "invalid"),  # wider than the tile
        ({"cols": (16, 24)}, "invalid"),  # past the last column
        ({"tile": None}, "needs both"),
        ({"post": post[0:7]}, "7 column epilogues for the 8 columns"),
    ):
        ins = list(prog.instructions)
        ins[k] = dataclasses.replace(first, **change)
        issues = validate_program(dataclasses.replace(prog, instructions=ins), target)
        assert any(msg in i.message for i in issues), (change, issues)


def test_validate_program_rejects_bad_tile_sizes_empty_ranges_and_zero_point_counts():
    """The remaining branches of the tiled-MatMul check, each alone on a valid program."""
    from npu_backend.validate import validate_program

    n = 20
    target = tiling_target()
    prog = generate(model(per_channel_post(FLOAT, n, lut=False), 4, 16, n, tile=(4, 8, 16)), target)
    k = next(j for j, i in enumerate(prog.instructions) if isinstance(i, MatMul))
    first = prog.instructions[k]
    assert first.cols == (0, 8)
    for change, msg in (
        ({"tile": (0, 8, 16)}, "invalid"),  # a zero tile dimension
        ({"cols": (5, 5)}, "invalid"),  # an empty column range
        ({"w_zp": (0,) * 7}, "7 weight zero points for the 8 columns"),
    ):
        ins = list(prog.instructions)
        ins[k] = dataclasses.replace(first, **change)
        issues = validate_program(dataclasses.replace(prog, instructions=ins), target)
        assert any(msg in i.message for i in issues), (change, issues)
    ok = list(prog.instructions)
    ok[k] = dataclasses.replace(first, w_zp=(0,) * 8)  # one zero point per column is fine
    assert validate_program(dataclasses.replace(prog, instructions=ok), target) == []


def test_the_tiled_structure_is_honoured_even_when_operands_fit():
    base = model(requant_post(FLOAT), 6, 40, 13)
    step = dataclasses.replace(base.steps[0], structure="tiled")
    asked = LoweredModel(base.inputs, base.outputs, base.constants, [step])
    prog = generate(asked, FLOAT)
    assert {i.structure for i in prog.ops(MatMul)} == {"tiled"}
    x = x_of(6, 40)
    np.testing.assert_array_equal(run(prog, x)[0]["y"], run(generate(base, FLOAT), x)[0]["y"])


def test_a_tiled_matmuls_staging_peak_counts_its_output_type():
    """sram while a tile runs: input tile tm*tk, int32 accumulator and int8 output tm*tn."""
    tiled = model(requant_post(FLOAT), 32, 64, 32, tile=(16, 8, 16))
    streaming = tiling_target(wmem=512)
    _, c = run(generate(tiled, streaming), x_of(32, 64), target=streaming)
    live = {i.live_bytes["sram"] for i in c.per_instruction if i.opcode == "MatMul"}
    assert live == {16 * 16 * 1 + 16 * 8 * (4 + 1)}
