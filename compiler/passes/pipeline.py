"""The fixed pass order. Each pass is `run(graph, ctx) -> graph` in its own module.

1. cleanup   - remove Identity / no-op Reshape and Transpose, merge Reshape chains
               (so a MatMul and its activation become adjacent);
2. propose   - every activation table reachable backwards from a compute op is a site;
3. legality  - structural rules (one per function, reason codes from DESIGN.md);
4. gate      - the prover decides every structurally legal site (epilogue and
               index-map obligations); refuted counterexamples are replayed;
5. schedule_strategy - under `alternatives` only: a proven site whose fused form's
               scheduling structure the target cannot generate keeps the unfused
               alternative (`grouped_codegen_unsupported`, its proof kept);
6. rewrite   - proven sites become one fused node each; nothing else changes;
7. lower     - NPU steps for ops whose lowering obligation is proven, host steps
               (exactly ONNX Runtime's semantics) otherwise -> LoweredModel;
8. tile_columns - every tiled or grouped fused step: each column tile's parameters and
               table are the proven ones of exactly its columns (a check per site).

Running the pipeline again on its own output graph changes nothing.
"""

from __future__ import annotations

from compiler import heap
from compiler.ir.context import Context
from compiler.ir.graph import Graph
from compiler.passes import (
    cleanup,
    gate,
    legality,
    lower,
    propose,
    rewrite,
    schedule_strategy,
    tile_columns,
)
from compiler.phases import phase

PASSES = [  # (name, run); each pass's CPU is charged to the phase PHASE_OF names
    ("cleanup", cleanup.run),
    ("propose", propose.run),
    ("legality", legality.run),
    ("gate", gate.run),
    ("schedule_strategy", schedule_strategy.run),
    ("rewrite", rewrite.run),
    ("lower", lower.run),
    ("tile_columns", tile_columns.run),
]
PHASE_OF = {"cleanup": "legality", "propose": "legality", "legality": "legality", "gate": "prove"}


def _shape(g: Graph) -> tuple:
    """What a pass can change, cheaply: the node objects, their wiring and attribute dicts.

    Passes replace nodes (and attribute dicts) rather than editing attribute values in
    place, so this tells "changed" from "unchanged" for the log without digesting every
    weight (`Graph.fingerprint`, which the idempotency tests compare, costs O(parameters)).
    """
    return (
        tuple(g.inputs),
        tuple(g.outputs),
        tuple(g.values),
        tuple(
            (id(n), n.name, n.op, tuple(n.inputs), tuple(n.outputs), n.origin, id(n.attrs))
            for n in g.nodes
        ),
    )


def run_pipeline(g: Graph, ctx: Context) -> Graph:
    """Run every pass in order on `g` (modified in place and returned)."""
    for name, fn in PASSES:
        before = _shape(g)
        with phase(PHASE_OF.get(name, "lower")):
            g = fn(g, ctx)
            heap.release()  # what the pass dropped (a gate's probe sessions: 40 MB) leaves the RSS
        ctx.log.append(f"{name}: {'changed' if _shape(g) != before else 'unchanged'}")
    return g
