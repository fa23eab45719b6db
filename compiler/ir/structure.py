"""Which scheduling structure a fused site gets, and whether the target can generate it.

A helper of legality, rewrite and the `schedule_strategy` pass, not a pass.

A fused MatMul-with-postprocessing can only be generated in the scheduling structures the
target lists in `fused_structures` (`npu_backend.target.ComputeCaps`); the structure itself
comes from the user's map (`schedule={"node": "plain" | "grouped" | "tiled"}`) or from the
backend scheduler (`npu_backend.schedule`: tiled when the buffers exceed the memories).
Three strategies (`CompileConfig.schedule_strategy`) answer "which comes first":

- `early` (default): the structure is the user's map, else "plain", and the target is
  queried before proving (legality's `grouped_codegen_unsupported` rule). A fused op that
  only fits tiled is then fused in "plain" and, where the target cannot tile a fused op,
  placed on the host whole by lowering.
- `alternatives`: every structurally legal site is proven; then (the `schedule_strategy`
  pass, before rewrite)
  each proven site's fused form is scheduled (the user's map, else the scheduler's choice
  for the fused step) and kept fused only where the target can generate it in that
  structure; otherwise the legal unfused alternative is kept, the site is reported
  `grouped_codegen_unsupported` and its proof stays recorded.
- `late`: the final schedule is chosen first, on the unfused graph (the user's map, else
  the scheduler's choice for the compute op as it stands, e.g. tiled because its int32
  result exceeds sram), then fusion is decided knowing it (legality rejects the site
  before proving).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from compiler.ir import npu_step
from compiler.ir.fuse import fused_origin, post_of
from compiler.ir.graph import Graph, Node
from compiler.ir.site import Site
from compiler.ir.strategy import DEFAULT_STRATEGY, ScheduleStrategy, parse_strategy
from npu_backend.buffers import storage_dtype
from npu_backend.lowered import NpuMatMul
from npu_backend.schedule import resident_fits

__all__ = [
    "DEFAULT_STRATEGY",
    "OPTIONS",
    "UNSUPPORTED",
    "ScheduleStrategy",
    "fused_step",
    "legality_problem",
    "parse_strategy",
    "scheduler_structure",
    "structure_of_site",
    "unsupported",
    "validated_structure",
]


UNSUPPORTED = "this fused computation cannot yet be generated in this scheduling structure"
OPTIONS = "disable this fusion, keep the original graph, or change grouping"


def _asked(site: Site, ctx) -> str | None:
    asked = ctx.config.asked_structure(site.compute.origin)
    return None if asked is None else str(asked)


def scheduler_structure(g: Graph, n: Node, y_name: str, ctx) -> str:
    """The backend scheduler's structure for matmul node `n` writing IR value `y_name`:
    "plain" when its operands are resident in the memories, else "tiled"."""
    pl = npu_step.place_matmul(g, n, None, "plain", y_name)
    sizes = {
        v.name: int(np.prod(v.shape, dtype=np.int64)) * np.dtype(storage_dtype(v.dtype)).itemsize
        for v in pl.buffers()
    }
    return "plain" if resident_fits(pl.step, sizes, ctx.config.target) else "tiled"


def structure_of_site(g: Graph, site: Site, ctx) -> str:
    """The scheduling structure the site's compute op gets under the configured strategy:
    the user's map first; else `early` "plain", `late` the scheduler's choice for the
    unfused compute op, `alternatives` the scheduler's choice for the fused form."""
    asked = _asked(site, ctx)
    strategy = ctx.config.schedule_strategy
    if asked is not None or strategy is ScheduleStrategy.EARLY:
        return asked or "plain"
    if strategy is ScheduleStrategy.LATE:
        return scheduler_structure(g, site.compute, site.compute.output, ctx)
    return scheduler_structure(g, site.compute, site.activation.output, ctx)


def validated_structure(g: Graph, site: Site, ctx) -> str:
    """The structure legality validates the site's fused step in, before proving: under
    `alternatives` the structure is picked after proving (the `schedule_strategy` pass), so
    the step is validated as "plain"; otherwise `structure_of_site`."""
    if ctx.config.schedule_strategy is ScheduleStrategy.ALTERNATIVES:
        return "plain"
    return structure_of_site(g, site, ctx)


def fused_step(g: Graph, site: Site, groups: Any, ctx) -> NpuMatMul:
    """The fused NpuMatMul `site` lowers to once rewritten, in the structure it is validated
    in before proving (`validated_structure`), built by `npu_step.place_matmul`."""
    n = site.compute
    post = post_of(groups, n.attrs["w"].shape[1])
    structure = validated_structure(g, site, ctx)
    out = site.activation.output
    return npu_step.place_matmul(g, n, post, structure, out, fused_origin(site)).step


def unsupported(g: Graph, site: Site, ctx, structure: str) -> str | None:
    """Why the target cannot generate the site's fused op in `structure` (None if it can)."""
    kind = npu_step.compute_kind(site.compute)
    caps = ctx.config.target.compute(kind)
    if caps is None or structure in caps.fused_structures:
        return None
    names = ", ".join(f"'{o}'" for o in site.compute.origin)
    why = (
        "as asked"
        if _asked(site, ctx) is not None
        else "by the backend scheduler: its buffers exceed the target's memories"
    )
    return (
        f"{names} is scheduled as '{structure}' ({why}): {UNSUPPORTED} (fused postprocessing "
        f"on '{ctx.config.target.name}' is generated only for {sorted(caps.fused_structures)})"
    )


def legality_problem(g: Graph, site: Site, ctx) -> str | None:
    """Legality's structure question: decided before proving under `early` and `late`,
    after proving (by the `compiler.passes.schedule_strategy` pass) under `alternatives`."""
    if ctx.config.schedule_strategy is ScheduleStrategy.ALTERNATIVES:
        return None
    return unsupported(g, site, ctx, structure_of_site(g, site, ctx))
