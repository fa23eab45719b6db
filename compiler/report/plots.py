"""Charts of the HTML report, drawn with matplotlib and returned as inline SVG text.

matplotlib is the optional extra `report` (`pip install "npu-fusion-prover[report]"`);
`require_matplotlib` turns its absence into a one-line usage error. Text stays text in the
SVG (`svg.fonttype = none`, generic sans-serif), so the file needs no font files.
"""

from __future__ import annotations

import io
import re
from typing import Any

import numpy as np

from compiler.cli.common import UsageError
from prover.verdict import Status

from .inert import visible
from .views import EpilogueView, GraphNode, TableView

VERDICT_COLOURS = {
    "proven": "#2e9e4f",
    "refuted": "#d64545",
    "unknown": "#e0a020",
    "rejected": "#8a8f98",
    None: "#ffffff",
}
ORIGINAL, FUSED, DIFF = "#3465a4", "#e8730c", "#6f42c1"
INSTALL = 'pip install "npu-fusion-prover[report]"'


def require_matplotlib() -> Any:
    """The `matplotlib.pyplot` module on the SVG backend, or a one-line `UsageError`."""
    try:
        import matplotlib
    except ImportError:
        raise UsageError(
            f"the HTML report needs matplotlib, which is not installed: {INSTALL}"
        ) from None
    matplotlib.use("svg", force=True)
    matplotlib.rcParams.update(
        {
            "svg.fonttype": "none",
            "svg.hashsalt": "npu-fusion-prover",  # deterministic ids
            "font.family": "sans-serif",
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    )
    import matplotlib.pyplot as plt

    return plt


def _svg(fig: Any, tight: bool = False) -> str:
    plt = require_matplotlib()
    buf = io.StringIO()
    # fixed margins (no tight_layout): a tight layout costs a full extra draw per figure
    fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight" if tight else None)
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg") :]  # drop the XML prolog and DOCTYPE: it is inline
    return re.sub(r"<metadata>.*?</metadata>", "", text, count=1, flags=re.S)


def graph_svg(nodes: list[GraphNode], edges: list[tuple[str, str]]) -> str:
    """The ONNX graph, layered left to right (long chains wrap); each site's nodes coloured
    by verdict and linked to its section; host-placed ops dashed with a "host" badge."""
    import networkx as nx

    plt = require_matplotlib()
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    g = nx.DiGraph()
    g.add_nodes_from(n.name for n in nodes)
    g.add_edges_from(edges)
    pos: dict[str, tuple[float, float]] = {}
    rows = 0
    for comp in sorted(nx.weakly_connected_components(g), key=lambda c: _first(nodes, c)):
        sub = g.subgraph(comp)
        layers = list(nx.topological_generations(sub))
        height = max(len(layer) for layer in layers)
        bands = -(-len(layers) // WRAP)  # a long chain wraps into bands of WRAP layers
        for i, layer in enumerate(layers):
            band = i // WRAP
            for k, name in enumerate(sorted(layer, key=lambda n: _first(nodes, {n}))):
                y = rows + band * height + k + (height - len(layer)) / 2
                pos[name] = (float(i % WRAP), -y)
        rows += bands * height
    cols = 1 + max((int(p[0]) for p in pos.values()), default=0)
    fig, ax = plt.subplots(figsize=(min(2.3 * cols + 0.6, 16), min(0.62 * rows + 0.5, 30)))
    w, h = 0.78, 0.56
    for u, v in edges:
        (x0, y0), (x1, y1) = pos[u], pos[v]
        ax.add_patch(
            FancyArrowPatch(
                (x0 + w / 2, y0), (x1 - w / 2, y1), arrowstyle="-|>", mutation_scale=9, lw=0.9
            )
        )
    by_name = {n.name: n for n in nodes}
    for name, (x, y) in pos.items():
        n = by_name[name]
        box = FancyBboxPatch(
            (x - w / 2, y - h / 2),
            w,
            h,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            facecolor=VERDICT_COLOURS.get(n.verdict, "#ffffff"),
            edgecolor="#222222",
            lw=1.8 if n.host else 0.8,
            linestyle="--" if n.host else "-",
            alpha=0.92,
        )
        href = n.href or (f"#{n.site}" if n.site else None)
        if href:
            box.set_url(href)
        ax.add_patch(box)
        dark = n.verdict in (Status.PROVEN, Status.REFUTED, Status.REJECTED)
        label = f"{_short(visible(n.op_type), 22)}\n{_short(visible(n.name), 22)}"
        if n.host:  # a badge on the box's corner: this op runs on the host CPU
            ax.text(x + w / 2, y + h / 2, "host", ha="right", va="center", fontsize=6,
                    color="white", bbox={"boxstyle": "round,pad=0.2", "fc": "#222222", "lw": 0})  # fmt: skip
        t = ax.text(
            x,
            y,
            label,
            ha="center",
            va="center",
            fontsize=7,
            color="white" if dark else "#111111",
            parse_math=False,  # a name from the model is text, never a (failing) formula
        )
        if href:
            t.set_url(href)
    ax.set_xlim(-0.6, cols - 0.4)
    ax.set_ylim(-rows + 0.4, 0.6)
    ax.set_axis_off()
    return _svg(fig, tight=True)


WRAP = 4  # graph layers per band


def _first(nodes: list[GraphNode], names: set) -> int:
    return min(i for i, n in enumerate(nodes) if n.name in names)


def _short(name: str, n: int = 18) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def _stairs(ax: Any, ev: EpilogueView, values: np.ndarray, **kw: Any) -> None:
    edges = np.append(ev.starts, ev.hi + 1).astype(float)
    ax.stairs(np.where(ev.valid, values, np.nan).astype(float), edges, baseline=None, **kw)


def _shade(ax: Any, ev: EpilogueView) -> None:
    for k, tail in enumerate(ev.tails):
        if tail is not None:
            ax.axvspan(
                tail[0], tail[1] + 1, color="#999999", alpha=0.13, lw=0,
                label="constant (saturating) tails" if k == 0 or ev.tails[0] is None else None,
            )  # fmt: skip
    ax.axvspan(ev.central[0], ev.central[1] + 1, color="#4caf50", alpha=0.07, lw=0,
               label="central region")  # fmt: skip


def epilogue_svg(ev: EpilogueView) -> str:
    """Original vs fused over the whole range, a zoom on the central region with the
    half-step boundaries, and the difference curve; counterexample and max marked."""
    plt = require_matplotlib()
    fig, axs = plt.subplots(3, 1, figsize=(7.2, 6.4), height_ratios=[1.1, 1.2, 0.8])
    full, zoom, diff = axs
    for ax, title in ((full, "whole reachable range"), (zoom, "central region")):
        _shade(ax, ev)
        _stairs(ax, ev, ev.before, color=ORIGINAL, lw=1.6, label="original (reference)")
        _stairs(ax, ev, ev.after, color=FUSED, lw=1.0, ls="--", label="fused (NPU)")
        ax.set_title(f"{ev.site} columns {_cols(ev)}: {title}", fontsize=9, loc="left")
        ax.set_ylabel("output")
    full.set_xlim(ev.lo, ev.hi + 1)
    c0, c1 = ev.central
    pad = max(1, (c1 - c0) // 20)
    zoom.set_xlim(c0 - pad, c1 + 1 + pad)
    inside = ev.steps[(ev.steps >= c0 - pad) & (ev.steps <= c1 + pad)]
    if 0 < inside.size <= 2000:
        zoom.vlines(inside, 0, 0.04, transform=zoom.get_xaxis_transform(), color="#555555",
                    lw=0.4, label=f"half-step boundaries ({ev.steps.size})")  # fmt: skip
    _shade(diff, ev)
    _stairs(diff, ev, ev.after - ev.before, color=DIFF, lw=1.2, label="fused - original")
    if ev.bound:
        for s in (-1, 1):
            diff.axhline(s * ev.bound, color="#999999", ls=":", lw=0.9)
    for a, b in ev.violations:
        for ax in axs:
            ax.axvspan(a, b + 1, color="#d64545", alpha=0.25, lw=0)
    if ev.cex is not None:
        i = int(np.searchsorted(ev.starts, ev.cex, side="right") - 1)
        for ax, y in ((full, ev.before[i]), (zoom, ev.before[i])):
            ax.plot(
                [ev.cex], [y], "o", color="#d64545", ms=6, label=f"counterexample {ev.var}={ev.cex}"
            )
            ax.plot([ev.cex], [ev.after[i]], "x", color="#d64545", ms=7)
        diff.plot([ev.cex], [ev.after[i] - ev.before[i]], "o", color="#d64545", ms=6)
    if ev.max_at is not None:
        i = int(np.searchsorted(ev.starts, ev.max_at, side="right") - 1)
        diff.plot([ev.max_at], [ev.after[i] - ev.before[i]], "v", color="#222222", ms=6,
                  label=f"max |diff| {ev.max_diff} at {ev.var}={ev.max_at}")  # fmt: skip
    diff.set_xlim(ev.lo, ev.hi + 1)
    diff.set_ylabel("difference")
    diff.set_xlabel(f"accumulator ({ev.var})")
    lim = max(1, ev.bound, int(np.abs(ev.diff).max()) if ev.diff.size else 1)
    diff.set_ylim(-lim - 0.5, lim + 0.5)
    for ax in axs:
        ax.legend(fontsize=7, loc="upper left", frameon=False)
    fig.subplots_adjust(left=0.1, right=0.98, top=0.96, bottom=0.08, hspace=0.4)
    return _svg(fig)


def _cols(ev: EpilogueView) -> str:
    return f"{ev.columns[0]}..{ev.columns[-1]}" if ev.columns else "?"


def table_svg(tab: TableView, site: str) -> str:
    """Reference table vs NPU table over the LUT's input values; differing entries marked."""
    plt = require_matplotlib()
    fig, ax = plt.subplots(figsize=(7.2, 2.6))
    ax.step(tab.index, tab.reference, where="mid", color=ORIGINAL, lw=1.6, label="reference table")
    ax.step(tab.index, tab.npu, where="mid", color=FUSED, lw=1.0, ls="--", label="NPU table")
    d = tab.differing
    if d.size:
        ax.plot(tab.index[d], tab.npu[d], "o", mfc="none", color="#d64545", ms=8,
                label=f"{d.size} differing entr{'y' if d.size == 1 else 'ies'}")  # fmt: skip
    ax.set_title(f"{site}: tables", fontsize=9, loc="left")
    ax.set_xlabel("table input (requantized value)")
    ax.set_ylabel("table output")
    ax.legend(fontsize=7, loc="upper left", frameon=False)
    fig.subplots_adjust(left=0.1, right=0.98, top=0.9, bottom=0.18)
    return _svg(fig)


LEDGER_GROUPS = (  # one chart panel per unit: quantities of one unit share an axis
    ("bytes", (("bytes_not_written", "bytes not written"), ("bytes_not_read", "bytes not read"))),
    ("loads", (("table_loads_added", "table loads added"), ("param_loads_added", "parameter loads added"))),
    ("instructions", (("instructions_before", "instructions unfused"), ("instructions_after", "instructions fused"))),
    ("cycles", (("cycles_before", "cycles unfused"), ("cycles_after", "cycles fused"))),
    ("bytes", (("peak_sram_before", "peak SRAM unfused"), ("peak_sram_after", "peak SRAM fused"))),
)  # fmt: skip
LEDGER_FIELDS = tuple(f for _, fields in LEDGER_GROUPS for f in fields)


def ledger_svg(entry: dict[str, Any], title: str) -> str:
    """The ledger as small multiples: one panel per unit (bytes saved, loads added,
    instructions, cycles, peak SRAM), each with its own linear axis from 0, so a count of
    bytes never dwarfs a count of cycles."""
    plt = require_matplotlib()
    panels = []
    for unit, fields in LEDGER_GROUPS:
        got = [(lab, int(entry[k])) for k, lab in fields if entry.get(k) is not None]
        if got:
            panels.append((unit, got))
    if not panels:
        return "<p class='note'>no ledger quantity measured</p>"
    bars = sum(len(g) for _, g in panels)
    height = 0.32 * bars + 0.42 * len(panels) + 0.3
    fig, axs = plt.subplots(
        len(panels), 1, figsize=(5.4, height), squeeze=False,
        height_ratios=[len(g) + 0.8 for _, g in panels],
    )  # fmt: skip
    for ax, (unit, got) in zip(axs[:, 0], panels, strict=True):
        labels = [lab for lab, _ in got]
        values = [v for _, v in got]
        colours = ["#2e9e4f" if "not" in lab else "#3465a4" for lab in labels]
        b = ax.barh(labels, values, color=colours, height=0.7)
        ax.bar_label(b, labels=[f"{v:,}" for v in values], fontsize=7, padding=2)
        ax.invert_yaxis()
        ax.set_xlim(min(0, *values) * 1.3, max(1, *values) * 1.3)
        ax.set_xlabel(unit, fontsize=7, labelpad=1)
        ax.tick_params(labelsize=7)
    axs[0, 0].set_title(title, fontsize=9, loc="left")
    fig.subplots_adjust(left=0.36, right=0.97, top=1 - 0.3 / height, bottom=0.35 / height,
                        hspace=0.9)  # fmt: skip
    return _svg(fig)


def headline_svg(ev: EpilogueView) -> str:
    """The overview's plot: original vs fused on the central region, and their difference."""
    plt = require_matplotlib()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 4.3), height_ratios=[1.6, 1])
    c0, c1 = ev.central
    for ax in (top, bottom):
        _shade(ax, ev)
        ax.set_xlim(c0, c1 + 1)
        for a, b in ev.violations:
            ax.axvspan(a, b + 1, color="#d64545", alpha=0.25, lw=0)
    _stairs(top, ev, ev.before, color=ORIGINAL, lw=1.6, label="original (reference)")
    _stairs(top, ev, ev.after, color=FUSED, lw=1.0, ls="--", label="fused (NPU)")
    _stairs(bottom, ev, ev.after - ev.before, color=DIFF, lw=1.2, label="fused - original")
    if ev.cex is not None:
        top.axvline(ev.cex, color="#d64545", lw=0.8, label=f"counterexample {ev.var}={ev.cex}")
        bottom.axvline(ev.cex, color="#d64545", lw=0.8)
    top.set_title(f"{ev.site}: original vs fused, central region", fontsize=9, loc="left")
    top.legend(fontsize=7, loc="upper left", frameon=False)
    bottom.set_xlabel(f"accumulator ({ev.var})")
    bottom.set_ylabel("difference")
    lim = max(1, ev.bound, int(np.abs(ev.diff).max()) if ev.diff.size else 1)
    bottom.set_ylim(-lim - 0.5, lim + 0.5)
    fig.subplots_adjust(left=0.11, right=0.98, top=0.93, bottom=0.12, hspace=0.3)
    return _svg(fig)


def times_svg(sites: list[tuple[str, str, float]], of: int | None = None) -> str:
    """Per site (id, verdict, milliseconds): a bar of the time spent deciding it (`of`: the
    model's number of sites, when these are only the slowest)."""
    plt = require_matplotlib()
    fig, ax = plt.subplots(figsize=(6.4, 0.32 * len(sites) + 1.0))
    labels = [f"{sid} ({v})" for sid, v, _ in sites]
    bars = ax.barh(
        labels, [t for _, _, t in sites], color=[VERDICT_COLOURS[v] for _, v, _ in sites]
    )
    ax.bar_label(bars, fmt="%.1f ms", fontsize=7, padding=2)
    ax.invert_yaxis()
    ax.set_xlim(0, max(1.0, 1.25 * max(t for _, _, t in sites)))
    ax.set_xlabel("time to decide (ms)")
    some = f" (the {len(sites)} slowest of {of})" if of is not None and of > len(sites) else ""
    ax.set_title(f"no epilogue to plot: time per site{some}", fontsize=9, loc="left")
    h = 0.32 * len(sites) + 1.0
    fig.subplots_adjust(left=0.26, right=0.97, top=1 - 0.35 / h, bottom=0.5 / h)
    return _svg(fig)
