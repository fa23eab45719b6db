"""Public API: compile an ONNX model to a fused integer graph plus one verdict per site.

```python
from compiler.api import compile_model
from prover.policy import Policy
from npu_backend.target import load_target

r = compile_model("model.onnx", Policy.parse("bitwise"), load_target(None))
for s in r.sites:
    print(s.id, s.pattern, s.nodes, s.verdict, s.reason)
r.graph      # the fused integer IR (compiler.ir.graph.Graph)
r.lowered    # npu_backend.lowered.LoweredModel for npu_backend.codegen.generate
```
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import onnx

from compiler import heap
from compiler.errors import InternalError
from compiler.frontend.checked import CheckedModel
from compiler.frontend.reader import to_ir
from compiler.ir.context import CheckOptions, CompileConfig, Context, PipelineState
from compiler.ir.graph import Graph, Node, Value
from compiler.ir.site import Diagnostic, Site
from compiler.ort.reference_host import resolve_reference
from compiler.passes.pipeline import run_pipeline
from compiler.phases import phase
from compiler.proving.prove import start_workers
from prover.verdict import Status


@dataclass
class CompileResult:
    """Sites (one verdict each), the fused IR, the lowered model and diagnostics."""

    sites: list[Site]
    graph: Graph
    lowered: Any
    diagnostics: list[Diagnostic]
    original: Graph | None = None
    log: list[str] = field(default_factory=list)
    context: Context | None = None

    @property
    def summary(self) -> dict[str, int]:
        out = {
            "candidates": len(self.sites),
            "proven": 0,
            "refuted": 0,
            "unknown": 0,
            "rejected": 0,
        }
        for s in self.sites:
            if s.verdict is None:
                raise InternalError(f"{s.id} has no verdict")
            out[s.verdict.value] += 1
        return out

    def site(self, id_or_node: str) -> Site:
        """The site with this id, or the one covering this ONNX node name."""
        for s in self.sites:
            if s.id == id_or_node or id_or_node in s.nodes:
                return s
        raise KeyError(id_or_node)


def _store(proofs_dir, proofs_mode: str):
    if proofs_mode == "off" or proofs_dir is None:
        return None
    from prover.proofstore import ProofStore

    return ProofStore(proofs_dir, mode=proofs_mode)


def compile_model(
    model: str | os.PathLike | onnx.ModelProto | CheckedModel,
    policy: Any = None,
    target: Any = None,
    *,
    timeout_s: float = 10.0,
    proofs_dir: str | os.PathLike | None = None,
    proofs_mode: str = "off",
    solver: str = "auto",
    cross_check: bool = False,
    jobs: int = 1,
    compose_tables: bool = False,
    synthesis: bool = True,
    schedule: Mapping[str, str] | None = None,
    schedule_strategy: str | None = None,
    check_options: Mapping[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
    reference: Any = None,
) -> CompileResult:
    """Compile `model` for `target` under `policy` (default: bitwise on the default target).

    - `timeout_s`, `solver`, `cross_check`: passed to `prover.api.check` per obligation;
    - `jobs`: worker processes deciding the obligations (verdicts do not depend on it);
    - `proofs_dir`/`proofs_mode` ("rw" | "ro" | "off"): the proof store;
    - `check_options`: the same options as a dict (`timeout_s`, `solver`, `store`,
      `cross_check`, `jobs`), as the command-line tools pass them; it overrides the keywords;
      also `known` / `defer` (`compiler.ir.context.CheckOptions`: verdicts decided
      elsewhere, and collecting obligations undecided), as `prover zoo` runs models;
    - `compose_tables`: allow Act2(Act1(MatMul)) to fuse as one composed, proven table;
    - `synthesis` (default on; acts only on targets whose TOML declares a `synthesis` space):
      where rounding a fixed-point scale is refuted, synthesise the parameters in that
      space (`prover.synthesis`; each proposal is proven); False keeps rounding only;
    - `schedule`: ONNX compute node name -> scheduling structure ("plain", "grouped", "tiled");
    - `schedule_strategy`: "early" (default) | "alternatives" | "late", when a fused site's
      structure is decided (`compiler.ir.structure`); also in `check_options`;
    - `progress(done, total)`: called as sites are decided;
    - `reference`: the reference profile (a `prover.reference.ReferenceProfile` or its name,
      "ort-host" probes this machine's ONNX Runtime; default "onnx"); also in `check_options`.

    Raises `compiler.errors.FrontendError` on a model the frontend cannot accept.
    """
    opts = dict(check_options or {})
    config = CompileConfig.build(
        policy=policy,
        target=target,
        reference=opts.pop("reference", None) or reference,
        schedule=schedule,
        schedule_strategy=opts.pop("schedule_strategy", None) or schedule_strategy,
        check=CheckOptions(
            timeout_s=float(opts.pop("timeout_s", timeout_s)),
            solver=str(opts.pop("solver", solver)),
            cross_check=bool(opts.pop("cross_check", cross_check)),
            store=opts.pop("store", None) or _store(proofs_dir, proofs_mode),
            known=opts.pop("known", None),
            defer=opts.pop("defer", None),
        ),
        jobs=int(opts.pop("jobs", jobs)),
        compose_tables=compose_tables,
        synthesis=bool(opts.pop("synthesis", synthesis)),
        progress=progress,
        resolve_reference=resolve_reference,
    )
    with phase("frontend"):
        g, m = _frontend(model, config, opts.pop("frontend", None))
        heap.release()  # the frontend's ORT sessions and protos, before the passes allocate
    ctx = Context(config, PipelineState(model=m, original=_snapshot(g)))
    start_workers(config.jobs, g, ctx)  # if it pays: their start-up overlaps the legality work
    return _run(g, ctx)


def _frontend(model: Any, config: CompileConfig, cached: Any) -> tuple[Graph, Any]:
    """`to_ir` of `model`; with `cached` = (a `compiler.frontend.cache.FrontendCache`, the
    model file's digest, its size), a fresh snapshot of the IR read before under the same
    reference."""
    source = os.fspath(model) if isinstance(model, os.PathLike) else model
    if cached is None:
        return to_ir(source, reference=config.reference)
    cache, digest, cost = cached
    key = ("ir", digest, repr(config.reference))
    hit = cache.get(key)
    if hit is not None:
        return _snapshot(hit[0]), hit[1]
    g, m = to_ir(source, reference=config.reference)
    cache.put(key, (_snapshot(g), m), cost)
    return g, m


def _snapshot(g: Graph) -> Graph:
    """A copy of the IR the passes cannot change: new node objects, edge lists and
    attribute dicts (passes rebind those), sharing the attribute values (weights,
    tables: never modified in place), unlike a deep copy of every weight."""
    nodes = [
        Node(n.name, n.op, list(n.inputs), list(n.outputs), dict(n.attrs), n.origin)
        for n in g.nodes
    ]
    values = {k: Value(v.name, v.dtype, v.shape) for k, v in g.values.items()}
    return Graph(
        values,
        nodes,
        list(g.inputs),
        list(g.outputs),
        dict(g.opsets),
        tuple(g.dynamic_batch),
        dict(g.qdq_activation_types),
    )


def recompile(result: CompileResult) -> CompileResult:
    """Run the pipeline again on a result's own output graph (idempotency check)."""
    assert result.context is not None
    return _run(result.graph.clone(), result.context.fresh())


def _run(g: Graph, ctx: Context) -> CompileResult:
    """Run the pipeline on `g` and collect the result (`ctx.original` already set)."""
    g = run_pipeline(g, ctx)
    if ctx.lowered is not None:
        ctx.lowered.dynamic_batch = tuple(g.dynamic_batch)
    return CompileResult(
        ctx.sites,
        g,
        ctx.lowered,
        site_diagnostics(ctx.sites) + host_diagnostics(ctx.original) + ctx.diagnostics,
        ctx.original,
        ctx.log,
        ctx,
    )


def host_diagnostics(graph):
    """The frontend's host placements (`compiler.ort.host.host_diagnostics`)."""
    from compiler.ort.host import host_diagnostics as diags

    return diags(graph)


def site_diagnostics(sites: list[Site]) -> list[Diagnostic]:
    """One diagnostic per site that was not fused."""
    out = []
    for s in sites:
        if s.verdict != Status.PROVEN and s.reason is not None:
            out.append(
                Diagnostic(s.reason.code, s.nodes, f"{s.id} ({s.pattern}): {s.reason.message}")
            )
    return out
