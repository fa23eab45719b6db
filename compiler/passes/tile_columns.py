"""Tile columns: a tiled or grouped fused step computes each column with its proven epilogue.

The gate proves one epilogue per group of output columns (per-channel scales, tables).
Once the backend splits a fused MatMul into column tiles, every tile must carry the
parameters, table and weight zero points of exactly the columns it computes: a
per-channel scale of another tile is the classic bug, and no epilogue obligation sees it.
This pass schedules every applied site's fused step the way codegen will
(`npu_backend.schedule.choose_schedule`), slices its epilogue the way codegen does
(`columns_of`) and checks each tile, column by column, against the epilogue the gate
proved for that column (`site.post`). A tiled or grouped site gets a `tile_columns`
entry in `site.details` (status "held", the structure and the column ranges); a
violation is a tool bug (`InternalError`), never a fused program. Codegen checks the
emitted instructions against the step as well (`npu_backend.codegen.check_column_tiles`);
`emitted_tiles` reads a generated program's tiles for the same check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from compiler.errors import InternalError
from compiler.ir.column_group import post_parts
from compiler.ir.graph import Graph
from compiler.ir.site import Site
from npu_backend.buffers import infer_specs, nbytes
from npu_backend.lowered import LoweredModel, NpuMatMul
from npu_backend.postprocess import (
    ColumnPosts,
    PostProcess,
    columns_of,
    per_column,
    same_but_scale,
)
from npu_backend.schedule import MatMulSchedule, ScheduleError, choose_schedule, resident_fits
from npu_backend.target import Target

if TYPE_CHECKING:  # a generated program's: a check generates none (no isa, no program)
    from npu_backend.program import Program

CHECK = "tile_columns"
STRUCTURES = ("tiled", "grouped")  # structures whose fused epilogue is checked per tile


@dataclass(frozen=True)
class ColumnTile:
    """One instruction's share of a MatMul: output columns [n0, n1), their epilogue and
    weight zero points."""

    cols: tuple[int, int]
    post: Any  # PostProcess | tuple[PostProcess, ...] | None
    w_zp: int | tuple[int, ...]


def schedule_of(
    step: NpuMatMul, lowered: LoweredModel, target: Target, specs: Any = None, sizes: Any = None
) -> MatMulSchedule:
    """The schedule codegen gives `step` in `lowered` (raises `ScheduleError` if none fits).
    `specs`, `sizes`: `infer_specs(lowered)` and its byte sizes, when the caller has them
    (computed once per model, not once per step)."""
    specs = infer_specs(lowered) if specs is None else specs
    if sizes is None:
        sizes = {k: nbytes(v) for k, v in specs.items() if v is not None}
    a, w = specs[step.a], specs[step.w]
    assert a is not None and w is not None
    resident = resident_fits(step, sizes, target)
    return choose_schedule(step, a.shape, w.shape[1], resident, target)


def planned_tiles(step: NpuMatMul, sch: MatMulSchedule) -> list[ColumnTile]:
    """The column tiles codegen emits for `step` under `sch` (its own slicing)."""
    return [
        ColumnTile(
            (n0, n1),
            None if step.post is None else columns_of(step.post, n0, n1),
            step.w_zp_columns(n0, n1),
        )
        for n0, n1 in sch.column_groups()
    ]


def emitted_tiles(program: Program, step_name: str, n_cols: int) -> list[ColumnTile]:
    """The column tiles of step `step_name` as emitted in `program` (its MatMul instructions,
    an untiled one covering all `n_cols` columns)."""
    from npu_backend.isa import MatMul

    return [
        ColumnTile(ins.cols or (0, n_cols), ins.post, ins.w_zp)
        for ins in program.instructions
        if isinstance(ins, MatMul) and ins.name == step_name
    ]


def proven_columns(site: Site, n_cols: int) -> list[PostProcess | None]:
    """The epilogue the gate proved for each output column of `site`."""
    per: list[PostProcess | None] = [None] * n_cols
    for grp in site.post or ():
        for j in grp.columns:
            per[j] = grp.post
    return per


def proven_alike(site: Site, n_cols: int) -> tuple[PostProcess, list[float]] | None:
    """(a post, each column's scale) where the gate proved every column's epilogue to be
    that post but for its requantization scale, read from each group (`post_parts`: a post
    `build_columns` left unmade stays so); None otherwise. It reads each group itself, not the
    run's lists the fused step's epilogue was read from (`compiler.ir.fuse.post_of`): the
    check does not share the reading it checks."""
    groups = site.post or ()
    if not groups:
        return None
    first = post_parts(groups[0])[0]
    scales: list[float | None] = [None] * n_cols
    alike: dict[int, bool] = {}  # by the id of a post the groups hold
    for grp in groups:
        p, s = post_parts(grp)
        ok = alike.get(id(p))
        if ok is None:
            ok = alike[id(p)] = same_but_scale(p, first)
        if not ok or s is None:
            return None
        for j in grp.columns:
            scales[j] = s
    if None in scales:
        return None
    return first, cast(list[float], scales)


def _tile_alike(post: Any, alike: tuple[PostProcess, list[float]] | None, n0: int, n1: int) -> bool:
    """Whether a tile's `ColumnPosts` is the proven epilogue of its columns [n0, n1)."""
    return (
        alike is not None
        and isinstance(post, ColumnPosts)
        and post.scales == tuple(alike[1][n0:n1])
        and same_but_scale(post.first, alike[0])
    )


def violation(site: Site, n_cols: int, tiles: Sequence[ColumnTile]) -> str | None:
    """How `tiles` fail to partition the `n_cols` columns, each carrying the proven epilogue
    (parameters and table) and the weight zero points of exactly its columns; None if not.
    Columns alike but for their scale are compared by their scales (`proven_alike`)."""
    alike = proven_alike(site, n_cols)
    proven: list[PostProcess | None] | None = None  # made where a tile is compared by column
    w_zp = site.compute.attrs["w_zp"]
    zp_scalar = np.ndim(w_zp) == 0  # once: np.ndim converts a per-column tuple each call
    pos = 0
    for t in tiles:
        n0, n1 = t.cols
        if n0 != pos or not n0 < n1 <= n_cols:
            return f"column tile [{n0}, {n1}) does not continue the partition at column {pos}"
        pos = n1
        if per_column(t.post) and len(t.post) != n1 - n0:
            return f"column tile [{n0}, {n1}) carries {len(t.post)} column epilogues"
        tile_zps = np.asarray(t.w_zp, dtype=np.int64).reshape(-1)  # once per tile
        by_column = not _tile_alike(t.post, alike, n0, n1)
        if by_column and proven is None:
            proven = proven_columns(site, n_cols)
        for j in range(n0, n1):
            if by_column and (
                (t.post[j - n0] if per_column(t.post) else t.post) != cast(list, proven)[j]
            ):
                return (
                    f"column tile [{n0}, {n1}) computes column {j} with an epilogue that is not "
                    "the one proven for it (parameters or table of other columns)"
                )
            got_zp = tile_zps[0 if tile_zps.size == 1 else j - n0]
            if int(got_zp) != (int(w_zp) if zp_scalar else int(w_zp[j])):
                return f"column tile [{n0}, {n1}) uses another column's weight zero point at {j}"
    if pos != n_cols:
        return f"column tiles cover {pos} of {n_cols} columns"
    return None


def check_site(site: Site, step: NpuMatMul, sch: MatMulSchedule) -> dict[str, Any] | None:
    """The site's `tile_columns` entry (None when its step is neither tiled nor grouped)."""
    structure = sch.structure if sch.tiled else step.structure
    if structure not in STRUCTURES:
        return None
    tiles = planned_tiles(step, sch)
    why = violation(site, sch.n, tiles)
    entry: dict[str, Any] = {
        "check": CHECK,
        "status": "held" if why is None else "violated",
        "structure": structure,
        "tiles": [list(t.cols) for t in tiles],
    }
    if why is not None:
        entry["message"] = why
    return entry


def run(g: Graph, ctx) -> Graph:
    """Check every applied site's tiled or grouped fused step (see the module doc)."""
    lowered = ctx.state.lowered
    if lowered is None:
        return g
    steps = {st.name: st for st in lowered.steps if isinstance(st, NpuMatMul) and st.fused}
    specs = sizes = None  # the model's tensor specs and sizes, once (not once per site)
    for site in ctx.state.sites:
        step = steps.get(site.compute.name)
        if not site.applied or step is None:
            continue  # not fused, or the fused op was placed on the host
        if specs is None:
            specs = infer_specs(lowered)
            sizes = {k: nbytes(v) for k, v in specs.items() if v is not None}
        try:
            sch = schedule_of(step, lowered, ctx.config.target, specs, sizes)
        except ScheduleError:
            continue  # codegen refuses the step itself, with this error
        entry = check_site(site, step, sch)
        if entry is None:
            continue
        site.details.append(entry)
        if entry["status"] != "held":
            raise InternalError(f"{site.id}: {CHECK}: {entry['message']}")
    return g


def check_program(sites: Sequence[Site], lowered: LoweredModel, program: Program) -> None:
    """The same check on a generated program: every applied site's emitted MatMul
    instructions carry the proven epilogue and weight zero points of exactly their columns
    (raises `InternalError` naming the site and the tile)."""
    steps = {st.name: st for st in lowered.steps if isinstance(st, NpuMatMul) and st.fused}
    for site in sites:
        step = steps.get(site.compute.name)
        if not site.applied or step is None:
            continue
        n = int(np.shape(lowered.constants[step.w])[1])
        why = violation(site, n, emitted_tiles(program, step.name, n))
        if why is not None:
            raise InternalError(f"{site.id}: {CHECK} in the generated program: {why}")
