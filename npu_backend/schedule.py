"""Choosing a MatMul's schedule: operands resident in sram/wmem, or tiles over M, N, K.

A "plain" schedule keeps the whole input in sram, the weights and bias in wmem and the
output in sram (one launch). When those buffers exceed the target's memories, or the
step asks for a tile (`NpuMatMul.tile`) or the "tiled" structure, the MatMul is "tiled"
(a "grouped" step is scheduled like a plain one): one instruction per
column group of at most `tn` columns, each streaming [tm, tk] input tiles and [tk, tn]
weight tiles from dram through staging buffers, accumulating over K and postprocessing
each finished [tm, tn] output tile with the parameters and table of exactly its columns.

Staging buffers of a tiled MatMul (what must fit, on top of nothing else):
  sram: input tile tm*tk, int32 accumulator tm*tn, output tile tm*tn;
  wmem: weight tile tk*tn (the whole [K, tn] block when `w_stationary`), bias tn int32;
  pmem: the parameter record of tn columns.
Among the tiles that fit, the one moving the fewest dram bytes is chosen (input re-read
once per column group, weights once per M tile unless stationary), then fewest tiles.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from prover.conv import halo_rows
from prover.inttypes import int_type

from .lowered import NpuMatMul
from .postprocess import column_record_nbytes, per_column, posts_but_scale, record_nbytes
from .target import Target

ALIGN = 64
ACC_BYTES = 4  # the int32 accumulator


def aligned(n: int) -> int:
    """Bytes an allocation of `n` bytes occupies (at least one ALIGN block)."""
    return max(ALIGN, -(-n // ALIGN) * ALIGN)


class ScheduleError(ValueError):
    """No schedule of a MatMul fits the target (or an explicit tile is invalid)."""


@dataclass(frozen=True)
class MatMulSchedule:
    """Tile sizes of one MatMul over its problem (rows x K) @ (K x N)."""

    rows: int
    n: int
    k: int
    tm: int
    tn: int
    tk: int
    tiled: bool
    w_stationary: bool = False

    @property
    def structure(self) -> str:
        return "tiled" if self.tiled else "plain"

    @property
    def tile(self) -> tuple[int, int, int]:
        return (self.tm, self.tn, self.tk)

    def column_groups(self) -> list[tuple[int, int]]:
        """The [n0, n1) column ranges, one instruction each (one range when plain)."""
        if not self.tiled:
            return [(0, self.n)]
        return [(n0, min(n0 + self.tn, self.n)) for n0 in range(0, self.n, self.tn)]

    def tiles(self) -> int:
        return (
            math.ceil(self.rows / self.tm) * len(self.column_groups()) * math.ceil(self.k / self.tk)
        )


@dataclass(frozen=True)
class _Sizes:
    a: int  # bytes per element
    w: int
    out: int
    bias: bool
    record_per_col: int  # pmem bytes per column (0 if no postprocessing)
    record_fixed: int  # pmem bytes independent of the width (a per-tensor record)


def staging_sizes(step: NpuMatMul) -> _Sizes:
    """Element and record sizes that decide a MatMul's staging buffers."""
    posts = posts_but_scale(step.post)  # what the sizes read: all but the scale
    out_t = posts[0].output_type if posts else "int32"
    per_col = fixed = 0
    if per_column(step.post):
        per_col = column_record_nbytes(posts)
    elif posts:
        fixed = record_nbytes(posts[0])
    return _Sizes(
        a=int_type(step.a_type).numpy_dtype().itemsize,
        w=int_type(step.w_type).numpy_dtype().itemsize,
        out=np.dtype(int_type(out_t).numpy_dtype()).itemsize,
        bias=step.bias is not None,
        record_per_col=per_col,
        record_fixed=fixed,
    )


def staging(sz: _Sizes, tm: int, tn: int, tk: int, k: int, stationary: bool) -> dict[str, int]:
    """Bytes per memory the staging buffers of a (tm, tn, tk) tile occupy."""
    return {
        "sram": aligned(tm * tk * sz.a) + aligned(tm * tn * ACC_BYTES) + aligned(tm * tn * sz.out),
        "wmem": aligned((k if stationary else tk) * tn * sz.w)
        + (aligned(tn * ACC_BYTES) if sz.bias else 0),
        "pmem": aligned(sz.record_fixed + sz.record_per_col * tn)
        if sz.record_fixed or sz.record_per_col
        else 0,
    }


def _fits(need: dict[str, int], target: Target) -> bool:
    return all(v <= target.memory_size(m) for m, v in need.items())


def _candidates(d: int, unit: int) -> list[int]:
    out = {d}
    t = unit
    while t < d:
        out.add(t)
        t *= 2
    return sorted(out)


def tiling_allowed(step: NpuMatMul, target: Target) -> bool:
    """Whether the target can generate `step` in the "tiled" structure."""
    caps = target.compute(step.compute)
    if caps is None or "tiled" not in caps.structures or step.w_input:
        return False  # a run-time (batched) second operand is never streamed in tiles
    return not step.fused or "tiled" in caps.fused_structures


def resident_fits(step: NpuMatMul, sizes: Mapping[str, int], target: Target) -> bool:
    """Whether `step`'s whole input and output fit sram and its weights and bias wmem at
    once (codegen's memory check; otherwise the MatMul is tiled). `sizes`: bytes per tensor."""
    for mem, names in (("sram", (step.a, step.out)), ("wmem", (step.w, step.bias))):
        used = dict.fromkeys(x for x in names if x is not None)
        if sum(aligned(sizes[x]) for x in used if sizes.get(x)) > target.memory_size(mem):
            return False
    return True


def smallest_tile_fits(
    step: NpuMatMul, target: Target, shapes: Mapping[str, tuple[int, ...]] | None = None
) -> bool:
    """Whether a tile of at most one MAC block per dimension fits (true for any shape then).

    A conv over a window: one output row by at most one MAC block of columns, with its halo
    rows and whole [K, tn] weight block, for the input and weight shapes in `shapes` (without
    them: False)."""
    s = target.schedule
    sz = staging_sizes(step)
    if step.window is not None:
        if shapes is None or step.a not in shapes or step.w not in shapes:
            return False
        n = shapes[step.w][1]
        return _fits(conv_staging(step, shapes[step.a], 1, min(n, s.mac_n)), target)
    return _fits(staging(sz, s.mac_m, s.mac_n, s.mac_k, s.mac_k, False), target)


def conv_staging(step: NpuMatMul, a_shape: tuple[int, ...], tm: int, tn: int) -> dict[str, int]:
    """Staging bytes of a tiled conv over a window, input `a_shape` [N, *spatial, C]: tiles of
    `tm` output rows (first spatial axis) of one batch element by `tn` output channels.

      sram: the tile's input rows with their halo (`prover.conv.halo_rows`, padded width, all
        channels), int32 accumulator and output tile;
      wmem: the whole [K, tn] weight block (stationary over the row tiles) and tn biases;
      pmem: the parameter record of tn columns.
    """
    win = step.window
    assert win is not None
    sz = staging_sizes(step)
    r, spatial, c = win.rank, tuple(a_shape[1:-1]), int(a_shape[-1])
    out_sp = win.out_spatial(spatial)
    row_in = c * math.prod(spatial[i] + win.pads[i] + win.pads[r + i] for i in range(1, r))
    row_out = math.prod(out_sp[1:])
    k = c // win.group * math.prod(win.kernel)
    return {
        "sram": aligned(halo_rows(win, tm) * row_in * sz.a)
        + aligned(tm * row_out * tn * ACC_BYTES)
        + aligned(tm * row_out * tn * sz.out),
        "wmem": aligned(k * tn * sz.w) + (aligned(tn * ACC_BYTES) if sz.bias else 0),
        "pmem": aligned(sz.record_fixed + sz.record_per_col * tn)
        if sz.record_fixed or sz.record_per_col
        else 0,
    }


def _conv_schedule(
    step: NpuMatMul, a_shape: tuple[int, ...], n: int, target: Target
) -> MatMulSchedule:
    """A tiled conv's schedule: `rows` are output rows (first spatial axis, per batch
    element), `tm` of them per tile with their halo; `tn` columns; K is never split."""
    win = step.window
    assert win is not None
    rows = win.out_spatial(tuple(a_shape[1:-1]))[0]
    k = int(a_shape[-1]) // win.group * math.prod(win.kernel)
    if step.tile is not None:
        if len(step.tile) != 3 or any(int(t) <= 0 for t in step.tile):
            raise ScheduleError(f"{step.name}: tile {step.tile} must be three positive sizes")
        tm, tn = min(int(step.tile[0]), rows), min(int(step.tile[1]), n)
        need = conv_staging(step, a_shape, tm, tn)
        if not _fits(need, target):
            raise ScheduleError(f"{step.name}: tile {step.tile} needs {need} bytes of staging")
        return MatMulSchedule(rows, n, k, tm, tn, k, tiled=True, w_stationary=True)
    s = target.schedule
    best: tuple[tuple[int, int], MatMulSchedule] | None = None
    for tm in _candidates(rows, 1):
        for tn in _candidates(n, s.mac_n):
            if not _fits(conv_staging(step, a_shape, tm, tn), target):
                continue
            groups, m_tiles = math.ceil(n / tn), math.ceil(rows / tm)
            traffic = groups * m_tiles * halo_rows(win, tm)  # input rows read, halo re-reads
            cand = MatMulSchedule(rows, n, k, tm, tn, k, True, True)
            key = (traffic, cand.tiles())
            if best is None or key < best[0]:
                best = (key, cand)
    if best is None:
        raise ScheduleError(f"{step.name}: not even one output row of the conv fits the memories")
    return best[1]


def choose_schedule(
    step: NpuMatMul, a_shape: tuple[int, ...], n: int, resident: bool, target: Target
) -> MatMulSchedule:
    """The schedule of `step` with input shape `a_shape` and N output columns (see module doc);
    `resident`: whether its whole operands fit (`resident_fits`)."""
    rows, k = int(math.prod(a_shape[:-1])), int(a_shape[-1])
    sz = staging_sizes(step)
    if step.tile is None and resident and step.structure != "tiled":
        return MatMulSchedule(rows, n, k, rows, n, k, tiled=False)
    if step.window is not None and tiling_allowed(step, target):
        return _conv_schedule(step, a_shape, n, target)
    if not tiling_allowed(step, target):
        why = f"tile {step.tile} was asked for" if step.tile else "its buffers do not fit"
        raise ScheduleError(
            f"{step.name}: {why} and a {'fused ' if step.fused else ''}{step.compute} cannot "
            f"be generated in the 'tiled' structure on target {target.name!r}"
        )
    if step.tile is not None:
        if len(step.tile) != 3 or any(int(t) <= 0 for t in step.tile):
            raise ScheduleError(f"{step.name}: tile {step.tile} must be three positive sizes")
        tm, tn, tk = (min(int(t), d) for t, d in zip(step.tile, (rows, n, k), strict=True))
        stationary = _fits(staging(sz, tm, tn, tk, k, True), target)
        if not stationary and not _fits(staging(sz, tm, tn, tk, k, False), target):
            need = staging(sz, tm, tn, tk, k, False)
            raise ScheduleError(f"{step.name}: tile {step.tile} needs {need} bytes of staging")
        return MatMulSchedule(rows, n, k, tm, tn, tk, tiled=True, w_stationary=stationary)
    s = target.schedule
    best: tuple[tuple[int, int, int], MatMulSchedule] | None = None
    for tm in _candidates(rows, s.mac_m):
        for tn in _candidates(n, s.mac_n):
            groups = math.ceil(n / tn)
            for tk in _candidates(k, s.mac_k):
                for stationary in (True, False):
                    if not _fits(staging(sz, tm, tn, tk, k, stationary), target):
                        continue
                    m_tiles = math.ceil(rows / tm)
                    traffic = rows * k * sz.a * groups + k * n * sz.w * (
                        1 if stationary else m_tiles
                    )
                    cand = MatMulSchedule(rows, n, k, tm, tn, tk, True, stationary)
                    key = (traffic, cand.tiles(), -tk)
                    if best is None or key < best[0]:
                        best = (key, cand)
    if best is None:
        raise ScheduleError(
            f"{step.name}: not even a {s.mac_m}x{s.mac_n}x{s.mac_k} tile fits the target's memories"
        )
    return best[1]


__all__ = [
    "ALIGN",
    "MatMulSchedule",
    "ScheduleError",
    "aligned",
    "choose_schedule",
    "conv_staging",
    "resident_fits",
    "smallest_tile_fits",
    "staging",
    "staging_sizes",
    "tiling_allowed",
]
