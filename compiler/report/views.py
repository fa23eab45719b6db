"""What the HTML report draws, collected from a check run as plain data (no plotting here).

- the ONNX graph: nodes, edges, which site covers each node, which ops run on the host;
- per epilogue obligation: both sides over the whole accumulator range, exactly, as the
  prover's constant pieces (`prover.segments.pieces`), with the regions the design's
  numerical questions are about (constant tails, central region, half-step boundaries);
- per site with two tables (reference LUT vs NPU LUT): both tables and where they differ;
- the ledger of each applied fusion.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any

import numpy as np

from prover.verdict import Status

if TYPE_CHECKING:
    from compiler.cli.check_run import CheckRun
    from npu_backend.lowered import LoweredModel

MAX_PIECES = 20000  # above this (after merging equal neighbours) an epilogue is not drawn
MAX_GROUPS = 4  # epilogue groups drawn per site (per-channel models have one per column set
VERSIONED = ("npu-fusion-prover", "numpy", "onnx", "onnxruntime", "z3-solver", "bitwuzla")


@dataclass
class GraphNode:
    """One ONNX node: its name, op type, tensors, the site covering it and where it runs."""

    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    site: str | None = None
    verdict: str | None = None
    host: bool = False
    count: int = 1  # ONNX nodes or sites this box stands for (a collapsed graph)
    param: bool = False  # computes from constants only (a Constant, a weight's Dequantize)
    href: str | None = None  # where a click goes (default: the site's section)


@dataclass
class TableView:
    """The reference table and the NPU table of one epilogue, indexed by the LUT input."""

    index: np.ndarray  # input value of each entry (e.g. -128..127)
    reference: np.ndarray
    npu: np.ndarray

    @property
    def differing(self) -> np.ndarray:
        """Positions (into `index`) where the two tables differ."""
        return np.nonzero(self.reference != self.npu)[0]


@dataclass(kw_only=True)
class EpilogueView:
    """Both sides of one epilogue obligation over its whole accumulator range, exactly."""

    site: str
    columns: tuple[int, ...]
    var: str
    lo: int
    hi: int
    bound: int  # the policy's N (0 = bitwise)
    starts: np.ndarray  # merged constant pieces: [starts[i], ends[i]]
    ends: np.ndarray
    before: np.ndarray
    after: np.ndarray
    valid: np.ndarray  # both sides defined (reference assumed, implementation defined)
    steps: np.ndarray  # every step of either side: the requantizer's half-step boundaries
    tails: tuple[tuple[int, int] | None, tuple[int, int] | None]
    central: tuple[int, int]
    violations: list[tuple[int, int]]  # pieces beyond the policy (or undefined on the NPU)
    max_diff: int | None
    max_at: int | None  # first accumulator value reaching max_diff
    cex: int | None = None  # the site's counterexample accumulator, when in this group
    table: TableView | None = None
    note: str = ""

    @property
    def diff(self) -> np.ndarray:
        """after - before per piece (0 where either side is undefined)."""
        return np.where(self.valid, self.after - self.before, 0)


@dataclass
class SiteView:
    """What the report shows for one site beyond its `SiteReport`."""

    id: str
    epilogues: list[EpilogueView] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ledger: dict[str, Any] | None = None


@dataclass
class Views:
    """Everything the HTML report draws."""

    nodes: list[GraphNode]
    edges: list[tuple[str, str]]
    sites: dict[str, SiteView]
    ledger: list[dict[str, Any]]
    ledger_note: str
    versions: dict[str, str]


def collect(run: CheckRun, drawn: set[str] | None = None) -> Views:
    """The views of a `compiler.cli.check_run.CheckRun`; epilogues and ledgers only for
    the sites in `drawn` (None: every site)."""
    result, report = run.result, run.report
    verdicts = {s.id: s.verdict.value for s in report.sites}
    nodes, edges = _graph(None if result.context is None else result.context.model)
    host = _host_nodes(result.lowered)
    by_node: dict[str, str] = {}
    for s in report.sites:
        for name in s.nodes:
            by_node.setdefault(name, s.id)
    for n in nodes:
        n.site = by_node.get(n.name)
        n.verdict = verdicts.get(n.site) if n.site else None
        n.host = n.name in host
    ledger, note = _ledger(run)
    sites: dict[str, SiteView] = {}
    for cs in result.sites:
        if drawn is not None and cs.id not in drawn:
            continue
        sv = SiteView(cs.id)
        if cs.verdict is Status.PROVEN:  # only an applied fusion has a ledger entry to show
            sv.ledger = next(
                (e for e in ledger if set(e.get("onnx_nodes", ())) & set(cs.nodes)), None
            )
        _epilogues(result, cs, sv)
        sites[cs.id] = sv
    return Views(nodes, edges, sites, ledger, note, versions())


def versions() -> dict[str, str]:
    """Versions of Python and of the packages a verdict depends on."""
    out = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _graph(model: Any) -> tuple[list[GraphNode], list[tuple[str, str]]]:
    if model is None:
        return [], []
    nodes = [
        GraphNode(n.name or f"{n.op_type}_{i}", n.op_type, list(n.input), list(n.output))
        for i, n in enumerate(model.graph.node)
    ]
    constant = {t.name for t in model.graph.initializer} - {i.name for i in model.graph.input}
    for n in nodes:  # in graph order, so a producer is seen before its users
        if all(t in constant for t in n.inputs if t):
            n.param = True
            constant.update(n.outputs)
    producer = {o: n.name for n in nodes for o in n.outputs if o}
    edges = []
    for n in nodes:
        for t in n.inputs:
            if t in producer and (producer[t], n.name) not in edges:
                edges.append((producer[t], n.name))
    return nodes, edges


def _host_nodes(lowered: LoweredModel | None) -> set[str]:
    """ONNX node names of the steps the lowered model runs on the host."""
    from npu_backend.lowered import HostKernel, HostOnnx

    out: set[str] = set()
    for st in lowered.steps if lowered is not None else ():
        if isinstance(st, HostKernel | HostOnnx):
            out.update(st.onnx_nodes or (st.name,))
    return out


def _ledger(run: Any) -> tuple[list[dict[str, Any]], str]:
    """The run's ledger (npuc), else measured here on the simulator (prover check)."""
    if run.report.ledger is not None:
        return list(run.report.ledger.get("fusions", [])), ""
    try:
        from npu_backend.ledger import ledger

        entries = ledger(run.result.lowered, run.target)
    except Exception as e:  # noqa: BLE001 - the report says why there is no ledger
        return [], f"ledger not measured: {type(e).__name__}: {e}"
    return [e.to_json() for e in entries], ""


def _epilogues(result: Any, site: Any, sv: SiteView) -> None:
    if not site.post or site.compute.op != "matmul":
        return
    if not site.obligations:
        if site.verdict in (Status.REFUTED, Status.UNKNOWN):
            sv.notes.append("no epilogue obligation was decided for this site (see its reason)")
        return
    from compiler.passes.gate import obligations
    from prover.errors import NotApplicable

    try:
        obs = [ob for ob, _, _ in obligations(result.graph, site, result.context)]
    except Exception as e:  # noqa: BLE001 - drawing must never change a verdict
        sv.notes.append(f"epilogue not drawn: {type(e).__name__}: {e}")
        return
    obs = [ob for ob in obs if ob.kind == "epilogue"]
    decided = [ob for ob in obs if ob.hash in site.obligations]
    if len(decided) < len(obs):
        sv.notes.append("some epilogue obligations could not be rebuilt as decided; not drawn")
    decided, total = _members(decided)
    cex_acc = None
    if site.counterexample is not None:
        cex_acc = (site.counterexample.assignment or {}).get("acc")
    order = sorted(decided, key=lambda ob: ob.hash != site.obligation_hash)
    for ob in order[:MAX_GROUPS]:
        try:
            ev = epilogue_view(site.id, ob)
        except NotApplicable as e:
            sv.notes.append(f"{ob.note}: no exact piecewise form ({e})")
            continue
        if ev is None:
            sv.notes.append(f"{ob.note}: more than {MAX_PIECES} pieces; not drawn")
            continue
        if cex_acc is not None and ob.hash == site.obligation_hash and ev.lo <= cex_acc <= ev.hi:
            ev.cex = int(cex_acc)
        sv.epilogues.append(ev)
    if total > MAX_GROUPS:
        sv.notes.append(f"{total - MAX_GROUPS} more epilogue groups not drawn")


def _members(obs: list) -> tuple[list, int]:
    """(`obs` with a family of identities (`prover.family`) replaced by its members'
    obligations, as many as can be drawn; how many groups there are in all)."""
    from prover.family import Family

    out: list = []
    total = 0
    for ob in obs:
        if isinstance(ob, Family):
            out += [ob.column(i) for i in range(min(len(ob), MAX_GROUPS))]
            total += len(ob)
        else:
            out.append(ob)
            total += 1
    return out, total


def epilogue_view(site_id: str, ob: Any) -> EpilogueView | None:
    """The exact view of one epilogue obligation (None: too many pieces to draw)."""
    from prover.segments import pieces

    p = pieces(ob)
    lo, hi = ob.ranges[p.var]
    valid = p.assumed & p.defined
    key = np.stack([p.before, p.after, p.assumed, p.defined]).T
    keep = np.ones(p.starts.size, dtype=bool)
    keep[1:] = np.any(key[1:] != key[:-1], axis=1)  # merge equal neighbours (still exact)
    idx = np.nonzero(keep)[0]
    if idx.size > MAX_PIECES:
        return None
    starts = p.starts[idx]
    ends = np.append(starts[1:] - 1, hi)
    before, after, ok = p.before[idx], p.after[idx], valid[idx]
    assumed, defined = p.assumed[idx], p.defined[idx]
    bound = int(ob.policy.bound)
    bad = assumed & (~defined | (np.abs(before - after) > bound))
    diff = np.abs(before - after)
    max_diff = int(diff[ok].max()) if ok.any() else None
    max_at = int(starts[np.nonzero(ok & (diff == max_diff))[0][0]]) if max_diff else None
    tails, central = _regions(starts, ends, before, lo, hi)
    cols = _columns(ob.note)
    return EpilogueView(
        site=site_id,
        columns=cols,
        var=p.var,
        lo=int(lo),
        hi=int(hi),
        bound=bound,
        starts=starts,
        ends=ends,
        before=before,
        after=after,
        valid=ok,
        steps=p.starts[1:],
        tails=tails,
        central=central,
        violations=[(int(starts[i]), int(ends[i])) for i in np.nonzero(bad)[0]],
        max_diff=max_diff,
        max_at=max_at,
        table=table_view(ob),
        note=ob.note,
    )


def _columns(note: str) -> tuple[int, ...]:
    # gate notes read "<site> <pattern> columns A..B"
    try:
        a, b = note.rsplit("columns ", 1)[1].split("..")
        return (int(a), int(b))
    except (IndexError, ValueError):
        return ()


def _regions(starts, ends, before, lo: int, hi: int):
    """Constant tails at both ends of the range, and the central region between them."""
    n = before.size
    i = 0
    while i + 1 < n and before[i + 1] == before[0]:
        i += 1
    j = n - 1
    while j - 1 > i and before[j - 1] == before[-1]:
        j -= 1
    left = (int(lo), int(ends[i])) if n > 1 else None
    right = (int(starts[j]), int(hi)) if n > 1 and j > i else None
    c_lo = int(ends[i]) + 1 if left else int(lo)
    c_hi = int(starts[j]) - 1 if right else int(hi)
    if c_lo > c_hi:
        c_lo, c_hi = int(lo), int(hi)
    return (left, right), (c_lo, c_hi)


def _find_lut(t: Any) -> dict[str, Any] | None:
    from prover import terms as T

    while isinstance(t, T.Op):
        if t.prim == "lut":
            return t.kwargs
        if not t.args:
            return None
        t = t.args[0]
    return None


def table_view(ob: Any) -> TableView | None:
    """Both sides' tables, in input-value order, when each side ends in one table (else None)."""
    from prover.domain import NUMPY
    from prover.inttypes import int_type
    from prover.lut import lut_index

    b, a = _find_lut(ob.outputs_before[0]), _find_lut(ob.outputs_after[0])
    if b is None or a is None or b.get("in_type") != a.get("in_type"):
        return None
    t = int_type(b.get("in_type", "int8"))
    index = np.arange(t.min, t.max + 1, dtype=np.int64)
    sides = []
    for k in (b, a):
        tab = np.asarray(k["table"], dtype=np.int64)
        if tab.size != index.size:
            return None
        sides.append(tab[np.asarray(lut_index(NUMPY, index, t, k.get("index_order", "offset")))])
    return TableView(index, sides[0], sides[1])
