"""The HTML report: one self-contained file (inline CSS and SVG; no scripts, fonts or links
out) built from a check run. Charts come from `compiler.report.plots` (matplotlib), the data
from `compiler.report.views`; the page skeleton is `template.html`.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from importlib import resources
from string import Template
from typing import Any

import numpy as np

from . import plots as P
from .checks import of_site
from .graph_view import collapse
from .inert import visible
from .model import Report, SiteReport, Status, WholeModelCounterexample
from .views import EpilogueView, SiteView, Views, collect

MAX_ARRAY = 64  # array elements printed in full; larger arrays are summarised


SMALL = 8  # up to this many sites, every site gets a section with its plots
PROVEN_SHOWN = 3  # in a larger model: sections for the refuted, unknown and these proven
MAX_PLOTTED = 12  # sections whose plots are drawn at most (refuted first, then unknown)
MAX_SECTIONS = 48  # sections at most (every site is in the summary table either way)


def plan(r: Report) -> tuple[list[SiteReport], set[str]]:
    """(the sites with a section, in page order; the sites whose plots are drawn)."""
    if len(r.sites) <= SMALL:
        return list(r.sites), {s.id for s in r.sites}
    rank = {Status.REFUTED: 0, Status.UNKNOWN: 1}
    bad = sorted((s for s in r.sites if s.verdict in rank), key=lambda s: rank[s.verdict])
    proven = [s for s in r.sites if s.verdict is Status.PROVEN][:PROVEN_SHOWN]
    shown = (bad + proven)[:MAX_SECTIONS]
    return shown, {s.id for s in shown[:MAX_PLOTTED]}


def render(run: Any, progress: Callable[[int, int], None] | None = None) -> str:
    """The HTML report of a `compiler.cli.check_run.CheckRun`; `progress(done, total)` is
    told after each drawn part (the graph, each site's section, the ledger)."""
    P.require_matplotlib()
    r: Report = run.report
    shown, plotted = plan(r)
    views = collect(run, plotted)
    total, done = len(shown) + 3, 0

    def step() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    sections = {s.id for s in shown}
    nodes, edges, graph_note = collapse(
        views.nodes, views.edges, {s.id: s.pattern for s in r.sites}, sections
    )
    for n in nodes:
        if n.site:
            n.href = f"#{n.site}" if n.site in sections else f"#row-{n.site}"
    graph = P.graph_svg(nodes, edges) if nodes else "<p>no graph</p>"
    step()
    head = _headline(r, views)
    headline = P.headline_svg(head[1]) if head else _times(r)
    step()
    parts = []
    for s in shown:
        parts.append(_site(s, views.sites.get(s.id)))
        step()
    ledger = _ledger(views)
    step()
    tmpl = Template(resources.files("compiler.report").joinpath("template.html").read_text("utf-8"))
    return tmpl.substitute(
        version=_e(r.tool_version),
        title=_e(f"{r.model}: {_counts(r)}"),
        summary=_summary(r),
        graph=graph,
        graph_note=f'<p class="note">{_e(graph_note)}</p>' if graph_note else "",
        headline_title=_e(head[0] if head else "no epilogue to plot"),
        headline=headline,
        legend=_legend(),
        table=_table(r, sections, plotted),
        sites="\n".join(parts),
        ledger=ledger,
        meta=_meta(r, views),
    )


def _table(r: Report, sections: set[str], plotted: set[str]) -> str:
    """Every site in one table: verdict, pattern, nodes, reason code, time; linked to its
    section when it has one."""
    rows = []
    for s in r.sites:
        sid = _e(s.id)
        link = f'<a href="#{sid}">{sid}</a>' if s.id in sections else sid
        nodes = ", ".join(s.nodes[:3]) + (f" (+{len(s.nodes) - 3})" if len(s.nodes) > 3 else "")
        code = ""
        if s.reason is not None:  # the message on hover; the section or JSON has the rest
            code = f'<code title="{_e(s.reason.message)}">{_e(s.reason.code)}</code>'
        rows.append(
            f'<tr id="row-{sid}"><td>{link}</td>'
            f'<td><span class="pill {s.verdict.value}">{s.verdict.value}</span></td>'
            f"<td>{_e(s.pattern)}</td><td>{_e(nodes)}</td><td>{code}</td>"
            f"<td>{s.time_ms:.1f} ms</td></tr>"
        )
    if not rows:
        return ""
    hidden = len(r.sites) - len(sections)
    note = ""
    if hidden or len(plotted) < len(sections):
        note = (
            f'<p class="note">{len(sections)} of {len(r.sites)} sites have a section below '
            f"(refuted and unknown first, then the first {PROVEN_SHOWN} proven), "
            f"{len(plotted)} with plots; the JSON report has every site in full.</p>"
        )
    n = len(r.sites)
    opened = " open" if n <= TABLE_OPEN else ""
    return (
        f'<section id="sites"><details{opened}><summary><b>All {n} site{"" if n == 1 else "s"}'
        f'</b> (table)</summary>{note}<div class="wide"><table><tr><th>site</th><th>verdict</th>'
        "<th>pattern</th><th>nodes</th><th>reason</th><th>time</th></tr>"
        f"{''.join(rows)}</table></div></details></section>"
    )


TABLE_OPEN = 40  # a longer site table starts folded


def _e(s: Any) -> str:
    """`s` as inert HTML text: markup escaped, control characters shown (`inert.visible`)."""
    return html.escape(visible(s), quote=True)


def _counts(r: Report) -> str:
    s = r.summary
    return (
        f"{s.candidates} candidates: {s.proven} proven, {s.refuted} refuted, "
        f"{s.unknown} unknown, {s.rejected} rejected"
    )


def _summary(r: Report) -> str:
    s = r.summary
    pills = "".join(
        f'<span class="pill {v}">{n} {v}</span>'
        for v, n in (
            ("proven", s.proven),
            ("refuted", s.refuted),
            ("unknown", s.unknown),
            ("rejected", s.rejected),
        )
    )
    ref = (r.reference or {}).get("name", "?")
    return (
        f"{pills} policy <b>{_e(r.policy)}</b> &middot; target <b>{_e(r.target)}</b> "
        f"&middot; reference <b>{_e(ref)}</b> &middot; exit code {int(r.exit_code())}"
    )


def _times(r: Report) -> str:
    if not r.sites:
        return "<p class='note'>no candidate sites</p>"
    slow = sorted(r.sites, key=lambda s: -float(s.time_ms))[:TIMES_SHOWN]
    return P.times_svg([(s.id, s.verdict.value, float(s.time_ms)) for s in slow], len(r.sites))


TIMES_SHOWN = 20  # sites in the time chart (the slowest)


def _legend() -> str:
    items = [
        f'<span><span class="pill {v}">&nbsp;</span>{v}</span>'
        for v in ("proven", "refuted", "unknown", "rejected")
    ]
    items.append("<span>dashed border and <b>host</b> badge: op placed on the host</span>")
    items.append("<span>click a coloured node to jump to its site</span>")
    return "".join(items)


def _headline(r: Report, views: Views) -> tuple[str, EpilogueView] | None:
    order = sorted(r.sites, key=lambda s: s.verdict is not Status.REFUTED)  # stable: refuted first
    for s in order:
        sv = views.sites.get(s.id)
        if sv and sv.epilogues:
            return f"{s.id} ({s.verdict.value})", sv.epilogues[0]
    return None


def _row(k: str, v: str) -> str:
    return f"<tr><th>{_e(k)}</th><td>{v}</td></tr>"


def _site(s: SiteReport, sv: SiteView | None) -> str:
    rows = [
        _row("verdict", f'<span class="pill {s.verdict.value}">{s.verdict.value}</span>'),
        _row("nodes", ", ".join(f"<code>{_e(n)}</code>" for n in s.nodes)),
    ]
    if s.reason is not None:
        rows.append(_row("reason", f"<code>{_e(s.reason.code)}</code>: {_e(s.reason.message)}"))
        rows.append(_row("what it means", _e(s.reason.text)))
        rows.append(_row("what you can do", _e(s.reason.action)))
    rows.append(_row("time", f"{s.time_ms:.1f} ms"))
    rows.append(_row("solver", _e(s.solver or "none (decided before any proof)")))
    if s.obligation_hash:
        rows.append(_row("obligation", f"<code>{_e(s.obligation_hash)}</code>"))
    if s.max_diff is not None:
        rows.append(_row("max difference reached", str(s.max_diff)))
    parts = [
        f'<section id="{_e(s.id)}" class="site-{s.verdict.value}">',
        f"<h2>{_e(s.id)}: {_e(s.pattern)}</h2>",
        f'<div class="wide"><table>{"".join(rows)}</table></div>',
    ]
    if s.checks:
        parts.append(_checks(s))
    if s.counterexample is not None:
        parts.append(_counterexample(s.counterexample))
    if sv is not None:
        for ev in sv.epilogues:
            parts.append(_epilogue(ev))
        if sv.ledger is not None:
            flag = " &mdash; costs more than it saves" if sv.ledger.get("costs_more") else ""
            parts.append(f"<h3>Ledger (measured on the simulator){flag}</h3>")
            parts.append(_ledger_table(sv.ledger))
        parts.extend(f'<p class="note">{_e(n)}</p>' for n in sv.notes)
    parts.append("</section>")
    return "\n".join(parts)


def _checks(s: SiteReport) -> str:
    """The site's checks: per check one item (kind, status, counts, note) and its first
    impossible/refuted column groups, bounded (the JSON report has them all)."""
    items = []
    for c in of_site(s):
        cls = "" if c.status == "held" else ' class="diff"'
        head = f"<b>{_e(c.label)}</b> <span{cls}>{_e(c.status)}</span>"
        head += f": {_e(c.counts)}" if c.counts else ""
        head += f"; {_e(c.note)}" if c.note else ""
        sub = [f"<li>{_e(i.where)} {_e(i.outcome)}: {_e(i.message)}</li>" for i in c.listed]
        if c.more:
            sub.append(f"<li>... {_e(c.more_text())} (full list in the JSON report)</li>")
        items.append(f"<li>{head}" + (f"<ul>{''.join(sub)}</ul>" if sub else "") + "</li>")
    return f"<h3>Checks</h3><ul>{''.join(items)}</ul>"


def _array(a: np.ndarray) -> str:
    a = np.asarray(a)
    shape = "x".join(map(str, a.shape)) or "scalar"
    text = np.array2string(a, threshold=MAX_ARRAY, max_line_width=110)
    return f"{shape} {a.dtype}\n{text}"


def _counterexample(c: WholeModelCounterexample) -> str:
    out = ["<h3>Counterexample (replayed)</h3>"]
    local = ", ".join(f"{k}={v}" for k, v in c.assignment.items())
    if local or c.before is not None:
        out.append(
            f"<p>at <code>{_e(local)}</code>: original <b>{_e(c.before)}</b>, fused "
            f'<b class="diff">{_e("undefined" if c.after is None else c.after)}</b></p>'
        )
    diffs = c.differing()
    differ = {n for n, _, _, _ in diffs}
    rows: list[str] = []
    same: list[str] = []
    actual = c.actual or {}
    for name, a in (c.inputs or {}).items():
        rows.append(_row(f"input {name}", f"<pre>{_e(_array(a))}</pre>"))
    for name, a in (c.expected or {}).items():
        into = rows if name in differ else same
        into.append(_row(f"{name}, ONNX Runtime", f"<pre>{_e(_array(a))}</pre>"))
        if name in actual:
            into.append(_row(f"{name}, fused", f"<pre>{_e(_array(actual[name]))}</pre>"))
    if c.npz:
        rows.append(_row("data", f"<code>{_e(c.npz)}</code>"))
    out.append("<p>The whole-model input, and the outputs that differ:</p>")
    out.append(f'<div class="wide"><table>{"".join(rows)}</table></div>')
    if same:
        out.append(
            f"<details><summary>{len(same) // 2} other output(s), equal</summary>"
            f'<div class="wide"><table>{"".join(same)}</table></div></details>'
        )
    if diffs:
        shown = "; ".join(f"{n}{list(i)}: {e} vs {a}" for n, i, e, a in diffs[:8])
        more = f" (and {len(diffs) - 8} more)" if len(diffs) > 8 else ""
        out.append(
            f'<p>differing elements (ONNX Runtime vs fused): <span class="diff">{_e(shown)}</span>{more}</p>'
        )
    return "\n".join(out)


def _epilogue(ev: EpilogueView) -> str:
    cols = f"{ev.columns[0]}..{ev.columns[-1]}" if ev.columns else ""
    t0, t1 = ev.tails
    facts = [
        f"{ev.var} in [{ev.lo}, {ev.hi}] ({ev.hi - ev.lo + 1:,} values) in {ev.starts.size} "
        f"exact constant pieces; {ev.steps.size} half-step boundaries",
        f"central region [{ev.central[0]}, {ev.central[1]}]"
        + (f"; lower tail [{t0[0]}, {t0[1]}]" if t0 else "")
        + (f"; upper tail [{t1[0]}, {t1[1]}]" if t1 else ""),
    ]
    if ev.max_diff is not None:
        at = f" first at {ev.var}={ev.max_at}" if ev.max_at is not None else ""
        facts.append(
            f"largest |fused - original| reached: {ev.max_diff}{at} (policy bound {ev.bound})"
        )
    if ev.violations:
        shown = ", ".join(f"[{a}, {b}]" for a, b in ev.violations[:6])
        facts.append(
            f'<span class="diff">beyond the policy on {len(ev.violations)} piece(s): {shown}</span>'
        )
    out = [
        f"<h3>Epilogue, columns {_e(cols)}: original vs fused</h3>",
        "<ul>" + "".join(f"<li>{f if '<span' in f else _e(f)}</li>" for f in facts) + "</ul>",
        f'<div class="plot">{P.epilogue_svg(ev)}</div>',
    ]
    if ev.table is not None:
        tab = ev.table
        d = tab.differing
        out.append(f"<h3>Tables: reference vs NPU ({d.size} differing of {tab.index.size})</h3>")
        out.append(f'<div class="plot">{P.table_svg(tab, ev.site)}</div>')
        if d.size:
            rows = "".join(
                f'<tr><td>{tab.index[i]}</td><td>{tab.reference[i]}</td><td class="diff">{tab.npu[i]}</td></tr>'
                for i in d[:32]
            )
            out.append(
                '<div class="wide"><table><tr><th>table input</th><th>reference</th><th>NPU</th>'
                f"</tr>{rows}</table></div>"
            )
    return "\n".join(out)


def _ledger_table(entry: dict[str, Any]) -> str:
    """One fusion's ledger as numbers: each quantity unfused, fused (or the one figure)."""
    rows = []
    for unit, fields in P.LEDGER_GROUPS:
        for k, label in fields:
            if entry.get(k) is not None:
                rows.append(
                    f"<tr><th>{_e(label)}</th><td>{int(entry[k]):,}</td><td>{_e(unit)}</td></tr>"
                )
    return f'<div class="wide"><table>{"".join(rows)}</table></div>'


def _ledger(views: Views) -> str:
    out = ['<section id="ledger"><h2>Ledger: what fusing saves</h2>']
    if views.ledger_note:
        out.append(f'<p class="note">{_e(views.ledger_note)}</p>')
    if not views.ledger:
        out.append("<p>no fusion applied, nothing measured</p></section>")
        return "\n".join(out)
    total: dict[str, Any] = {}
    for e in views.ledger:
        for k, _ in P.LEDGER_FIELDS:
            if e.get(k) is not None:
                total[k] = total.get(k, 0) + int(e[k])
    costly = [e for e in views.ledger if e.get("costs_more")]
    if costly:
        items = "".join(
            f"<li><b>{_e(e['site'])}</b> ({_e(', '.join(e.get('onnx_nodes', ())))}): "
            f"{-int(e['saved']):,} {_e(e['cost_basis'])} more than unfused</li>"
            for e in costly
        )
        out.append(f"<p>Fusions that cost more than they save on this target:</p><ul>{items}</ul>")
    out.append(
        f"<p>{len(views.ledger)} applied fusion(s), {len(costly)} costing more than they save; "
        "model total (simulator counters; cycles from the target's schedule):</p>"
    )
    out.append(f'<div class="plot">{P.ledger_svg(total, "model total")}</div>')
    out.append("</section>")
    return "\n".join(out)


def _meta(r: Report, views: Views) -> str:
    ref = r.reference or {}
    rows = [
        _row("model", f"<code>{_e(r.model)}</code>"),
        _row("policy", _e(r.policy)),
        _row("target", _e(r.target)),
        _row("reference", f"<b>{_e(ref.get('name', '?'))}</b>: {_e(ref.get('summary', ''))}"),
    ]
    for k, v in ref.items():
        if k not in ("name", "summary"):
            rows.append(_row(f"reference {k}", f"<code>{_e(v)}</code>"))
    rows += [_row(k, f"<code>{_e(v)}</code>") for k, v in views.versions.items()]
    out = [
        '<section id="meta"><h2>Reference, target, policy, versions</h2>',
        f'<div class="wide"><table>{"".join(rows)}</table></div>',
    ]
    if r.findings:
        out.append("<h3>Findings</h3><ul>")
        out += [
            f"<li><code>{_e(f.get('code'))}</code>: {_e(f.get('message'))}</li>" for f in r.findings
        ]
        out.append("</ul>")
    if r.host_ops:
        out.append('<h3 id="host-ops">Kept on the host</h3><div class="wide"><table>')
        out.append("<tr><th>code</th><th>nodes</th><th>message</th><th>action</th></tr>")
        for d in r.host_ops:
            out.append(
                f"<tr><td><code>{_e(d.code)}</code></td><td>{_e(', '.join(d.nodes))}</td>"
                f"<td>{_e(d.message)}</td><td>{_e(d.action)}</td></tr>"
            )
        out.append("</table></div>")
    if r.proof_records:
        out.append("<h3>Proof records served</h3><ul>")
        out += [
            f"<li><code>{_e(p['record'])}</code>: {_e(p['served'])}</li>" for p in r.proof_records
        ]
        out.append("</ul>")
    out.append("</section>")
    return "\n".join(out)
