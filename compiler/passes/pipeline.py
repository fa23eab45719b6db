"""The fixed pass order. Each pass is `run(graph, ctx) -> graph` in its own module.

1. cleanup   - remove Identity / no-op Reshape and Transpose, merge Reshape chains
               (so a MatMul and its activation become adjacent);
2. propose   - every activation table reachable backwards from a compute op is a site;
3. legality  - structural rules (one per function, reason codes from DESIGN.md);
4. gate      - the prover decides every structurally legal site (epilogue and
               index-map obligations); refuted counterexamples are replayed;
5. rewrite   - proven sites become one fused node each; nothing else changes;
6. lower     - NPU steps for ops whose lowering obligation is proven, host steps
               (exactly ONNX Runtime's semantics) otherwise -> LoweredModel.

Running the pipeline again on its own output graph changes nothing.
"""

from __future__ import annotations

from compiler.ir.context import Context
from compiler.ir.graph import Graph
from compiler.passes import cleanup, gate, legality, lower, propose, rewrite

PASSES = [
    ("cleanup", cleanup.run),
    ("propose", propose.run),
    ("legality", legality.run),
    ("gate", gate.run),
    ("rewrite", rewrite.run),
    ("lower", lower.run),
]


def run_pipeline(g: Graph, ctx: Context) -> Graph:
    """Run every pass in order on `g` (modified in place and returned)."""
    for name, fn in PASSES:
        before = g.fingerprint()
        g = fn(g, ctx)
        ctx.log.append(f"{name}: {'changed' if g.fingerprint() != before else 'unchanged'}")
    return g
