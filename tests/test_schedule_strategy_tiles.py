"""The tile_columns check: every tiled or grouped fused epilogue uses the proven parameters
and table of exactly the columns it computes (per-channel scales across tile boundaries).

Positive: a per-channel MatMul+Sigmoid larger than sram, fused and tiled, reports the check
held per site (in JSON too) and equals ONNX Runtime bitwise; a grouped one holds with one
tile. Negative: a wrong slice in the compiler's tiling, a tile of a generated program
carrying another tile's parameters or zero points, a partition with a gap: all caught.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pytest
from cli_helpers import assert_one_line_error, npuc
from models import matmul_activation

from compiler.api import compile_model
from compiler.errors import InternalError
from compiler.ort.tables import ort_outputs
from compiler.passes import tile_columns
from compiler.passes.tile_columns import ColumnTile, check_program, emitted_tiles, violation
from compiler.report.json_form import site_json
from compiler.report.model import SiteReport
from npu_backend.codegen import generate
from npu_backend.isa import MatMul
from npu_backend.program import Program
from npu_backend.simulator import run
from npu_backend.target import load_target

FLOAT = load_target()
K, N, M = 256, 300, 24


def fused_tiled_target(sram: int = 16384, wmem: int = 8192):
    """npu_float with small memories and fused postprocessing also in "tiled"."""
    mm = FLOAT.compute("MatMul")
    assert mm is not None
    caps = dataclasses.replace(mm, fused_structures=mm.fused_structures | {"tiled"})
    computes = tuple(caps if c.op == "MatMul" else c for c in FLOAT.computes)
    mems = tuple((m, {"sram": sram, "wmem": wmem}.get(m, s)) for m, s in FLOAT.memories)
    return dataclasses.replace(FLOAT, computes=computes, memories=mems)


def big_model() -> onnx.ModelProto:
    """Per-channel weight scales: every column has its own requantization."""
    return matmul_activation(K=K, N=N, M=M, per_channel=True, w_scale=0.002)


def x_of(m: int = M, k: int = K) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(3).integers(-128, 128, (m, k)).astype(np.int8)}


def entry(site) -> dict:
    got = [d for d in site.details if d.get("check") == "tile_columns"]
    assert len(got) == 1, site.details
    return got[0]


@pytest.mark.parametrize("strategy", ["early", "alternatives", "late"])
def test_a_tiled_fused_site_reports_the_check_held_and_equals_ort(tmp_path, strategy):
    target = fused_tiled_target()
    model = big_model()
    r = compile_model(model, "bitwise", target, schedule_strategy=strategy, reference="ort-host")
    (site,) = r.sites
    assert site.applied
    e = entry(site)
    assert e["status"] == "held" and e["structure"] == "tiled"
    tiles = e["tiles"]
    assert len(tiles) > 1 and tiles[0][0] == 0 and tiles[-1][1] == N
    assert all(a[1] == b[0] for a, b in zip(tiles, tiles[1:], strict=False))
    assert site_json(SiteReport.of(site))["checks"] == [e]
    prog = generate(r.lowered, target)
    assert [list(i.cols) for i in prog.ops(MatMul)] == tiles  # what codegen emitted
    check_program(r.sites, r.lowered, prog)
    path = tmp_path / "big.onnx"
    onnx.save(model, path)
    got, _ = run(prog, x_of(), target=target)
    for name, want in ort_outputs(path, x_of()).items():
        np.testing.assert_array_equal(got[name], want, err_msg=name)


def test_a_grouped_fused_site_is_checked_as_one_tile():
    r = compile_model(
        matmul_activation(N=12, per_channel=True), "bitwise", FLOAT, schedule={"mm": "grouped"}
    )
    (site,) = r.sites
    assert r.lowered.steps[0].structure == "grouped" and site.applied
    assert entry(site) == {
        "check": "tile_columns",
        "status": "held",
        "structure": "grouped",
        "tiles": [[0, 12]],
    }


def test_a_plain_resident_site_has_no_tile_check():
    r = compile_model(matmul_activation(per_channel=True), "bitwise", FLOAT)
    (site,) = r.sites
    assert site.applied and not [d for d in site.details if "check" in d]
    assert "checks" not in site_json(SiteReport.of(site))


def test_a_wrong_slice_in_the_tiling_is_caught(monkeypatch):
    """The tiling hands each tile the epilogue one column to the right (an off-by-one
    slice): the per-channel requantizers no longer match the proven ones."""
    real = tile_columns.columns_of

    def shifted(post, n0, n1):
        n = len(post)
        return tuple(post[(j + 1) % n] for j in range(n0, n1)) if n0 else real(post, n0, n1)

    monkeypatch.setattr(tile_columns, "columns_of", shifted)
    with pytest.raises(InternalError, match=r"tile_columns: column tile \[\d+, \d+\) computes"):
        compile_model(big_model(), "bitwise", fused_tiled_target(), schedule_strategy="late")


@pytest.fixture(scope="module")
def compiled():
    target = fused_tiled_target()
    r = compile_model(big_model(), "bitwise", target, schedule_strategy="late")
    return r, generate(r.lowered, target)


def _tampered(prog: Program, edit) -> Program:
    ins = list(prog.instructions)
    k = [i for i, x in enumerate(ins) if isinstance(x, MatMul)]
    edit(ins, k)
    return dataclasses.replace(prog, instructions=ins)


def test_a_program_tile_with_another_tiles_parameters_is_caught(compiled):
    r, prog = compiled
    (site,) = r.sites

    def swap(ins, k):
        a, b = ins[k[0]], ins[k[1]]
        width = a.cols[1] - a.cols[0]
        assert b.cols[1] - b.cols[0] == width  # same width: only the parameters are wrong
        ins[k[0]], ins[k[1]] = (
            dataclasses.replace(a, post=b.post),
            dataclasses.replace(b, post=a.post),
        )

    assert violation(site, N, emitted_tiles(prog, "mm", N)) is None
    bad = _tampered(prog, swap)
    why = violation(site, N, emitted_tiles(bad, "mm", N))
    assert why is not None and "not the one proven for it" in why
    with pytest.raises(InternalError, match="tile_columns in the generated program"):
        check_program(r.sites, r.lowered, bad)


def test_a_program_tile_with_another_zero_point_is_caught(compiled):
    r, prog = compiled
    (site,) = r.sites

    def zp(ins, k):
        ins[k[-1]] = dataclasses.replace(ins[k[-1]], w_zp=3)

    why = violation(site, N, emitted_tiles(_tampered(prog, zp), "mm", N))
    assert why is not None and "weight zero point" in why


def test_tiles_that_do_not_partition_the_columns_are_caught(compiled):
    r, prog = compiled
    (site,) = r.sites
    tiles = emitted_tiles(prog, "mm", N)
    assert (
        violation(site, N, tiles[:-1]) == f"column tiles cover {tiles[-1].cols[0]} of {N} columns"
    )
    gap = [tiles[0], *tiles[2:]]
    assert "does not continue the partition" in violation(site, N, gap)
    t0 = tiles[0]
    short = ColumnTile(t0.cols, t0.post[:-1], t0.w_zp)
    assert "column epilogues" in violation(site, N, [short, *tiles[1:]])


def test_npuc_compile_reports_the_check_and_rejects_a_bad_strategy(tmp_path):
    mm = FLOAT.compute("MatMul")
    assert mm is not None
    text = open(FLOAT.path).read()
    for mem, size in (("sram", 16384), ("wmem", 8192)):
        old = f"[memories.{mem}]\nsize = {FLOAT.memory_size(mem)}\n"
        text = text.replace(old, f"[memories.{mem}]\nsize = {size}\n")
    text = text.replace(
        'fused_structures = ["plain", "grouped"]', 'fused_structures = ["plain", "tiled"]', 1
    )
    tgt = tmp_path / "t.toml"
    tgt.write_text(text)
    path = tmp_path / "big.onnx"
    onnx.save(big_model(), path)
    common = ["--target", tgt, "--proofs-mode", "off", "--no-progress"]
    r = npuc(
        "compile", path, "-o", tmp_path / "p.npuprog", "--report", tmp_path / "r.json",
        "--schedule-strategy", "late", *common,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (site,) = json.loads((tmp_path / "r.json").read_text())["sites"]
    assert site["verdict"] == "proven"
    assert [c["check"] for c in site["checks"]] == ["tile_columns"]
    assert site["checks"][0]["status"] == "held" and site["checks"][0]["structure"] == "tiled"
    bad = npuc("compile", path, "-o", tmp_path / "q", "--schedule-strategy", "first", *common)
    assert_one_line_error(bad, "--schedule-strategy", "first")


def test_the_regression_replay_checks_the_generated_tiles_too(compiled, monkeypatch):
    """`compiler.regress.replay.run_program` (emitted tests) runs the program check as
    `npuc compile` does: a generated tile with another column's zero point is refused."""
    from compiler.regress import replay
    from npu_backend import codegen

    r, prog = compiled

    def zp(ins, k):
        ins[k[-1]] = dataclasses.replace(ins[k[-1]], w_zp=3)

    target = fused_tiled_target()
    got = replay.run_program(r, target, x_of())
    want = run(prog, x_of())[0]
    assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in got)
    monkeypatch.setattr(codegen, "generate", lambda lowered, t: _tampered(prog, zp))
    with pytest.raises(InternalError, match="weight zero point"):
        replay.run_program(r, target, x_of())
