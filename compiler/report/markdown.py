"""Markdown summary for pull-request comments: one table of sites, then the counterexamples
and the sites' checks."""

from __future__ import annotations

import re

import numpy as np

from .checks import of_site
from .inert import visible
from .model import Diagnostic, Report, SiteReport, Status

MAX_ELEMENTS = 64  # array elements shown inline; larger arrays are summarised
ICON = {"proven": "✅", "refuted": "❌", "unknown": "⚠️", "rejected": "➖"}


# characters Markdown (GitHub's) gives a meaning in running text, backslash-escaped (an
# underscore inside a word, as in most names, makes no emphasis and stays); HTML's three as
# entities: no name from the model makes a tag, link, code span or emphasis
_MARKDOWN = re.compile(r"([\\`*\[\]|~]|_(?![^\W_])|(?<![^\W_])_)")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def _cell(text: object) -> str:
    """Text shown as it is in running text or one table cell: no markup, tag or newline
    (control characters escaped by `inert.visible`)."""
    t = _MARKDOWN.sub(r"\\\1", visible(str(text).replace("\n", " ")).strip())
    return "".join(_HTML.get(c, c) for c in t)


def _code(text: object) -> str:
    """A code span (no HTML or Markdown inside): backticks become quotes, controls escaped."""
    t = visible(str(text).replace("\n", " ")).replace("`", "'")
    return f"`{t}`"


def _fenced(text: object) -> str:
    """One line inside a ``` block: it cannot close the block."""
    return visible(text).replace("`", "'")


def _array(a: np.ndarray) -> str:
    a = np.asarray(a)
    shape = "x".join(map(str, a.shape)) or "scalar"
    if a.size > MAX_ELEMENTS:
        flat = a.reshape(-1)
        return f"{shape} {a.dtype}: {flat[:16].tolist()} ... ({a.size} values; full data in the JSON report)"
    return f"{shape} {a.dtype}: {a.tolist()}"


def _site_row(s: SiteReport) -> str:
    reason = "" if s.reason is None else f"{_code(s.reason.code)} {_cell(s.reason.message)}"
    if s.verdict is Status.PROVEN and s.max_diff:
        reason = f"max difference {s.max_diff}"
    return (
        f"| {_cell(s.id)} | {_cell(s.pattern)} | {_cell(', '.join(s.nodes))} | "
        f"{ICON[s.verdict.value]} {s.verdict.value} | {reason} | {s.time_ms:.0f} |"
    )


def _host_row(h: Diagnostic) -> str:
    return (
        f"| {_code(h.code)} | {_cell(', '.join(h.nodes))} | {_cell(h.message)} | "
        f"{_cell(h.action)} |"
    )


def _counterexample(s: SiteReport) -> list[str]:
    c = s.counterexample
    out = [f"#### {_cell(s.id)} ({_cell(', '.join(s.nodes))})", ""]
    if c is None:
        return out + [
            f"{_cell(s.reason.message if s.reason else 'refuted')} (no whole-model input)",
            "",
        ]
    local = ", ".join(f"{k}={v}" for k, v in c.assignment.items())
    after = "undefined" if c.after is None else c.after
    if local or c.before is not None:
        out += [f"At {_code(local)}: original **{c.before}**, fused **{after}**.", ""]
    out += ["Whole-model input:", "", "```"]
    out += [_fenced(f"{k}: {_array(v)}") for k, v in (c.inputs or {}).items()]
    out += ["```", "", "| output | element | ONNX Runtime | fused |", "|---|---|---|---|"]
    diffs = c.differing()
    out += [f"| {_cell(n)} | {list(i)} | {e} | {a} |" for n, i, e, a in diffs[:10]]
    if len(diffs) > 10:
        out.append(f"| ... | {len(diffs) - 10} more | | |")
    if c.npz:
        out += ["", f"Data: {_code(c.npz)}"]
    return out + [""]


def _checks(sites: list[SiteReport]) -> list[str]:
    """Per site with checks: one list item per check (kind, status, counts) and its first
    impossible/refuted column groups, bounded."""
    with_checks = [x for x in sites if x.checks]
    if not with_checks:
        return []
    out = ["### Checks", ""]
    for x in with_checks:
        out.append(f"**{_cell(x.id)}** ({_cell(', '.join(x.nodes))}): {x.verdict.value}")
        out.append("")
        for c in of_site(x):
            mark = "✅" if c.status == "held" else "❌"
            note = f"; {_cell(c.note)}" if c.note else ""
            out.append(
                f"- {mark} {_code(c.label)} {c.status}"
                + (f": {c.counts}" if c.counts else "")
                + note
            )
            out += [
                f"  - {_cell(i.where)} {_cell(i.outcome)}: {_cell(i.message)}" for i in c.listed
            ]
            if c.more:
                out.append(f"  - ... {c.more_text()} (full list in the JSON report)")
        out.append("")
    return out


def _num(v: object) -> str:
    return "-" if v is None else f"{v:,}"


def _ledger(ledger: dict | None) -> list[str]:
    """The measured ledger (npuc compile): per fusion, unfused -> fused on the simulator."""
    fusions = (ledger or {}).get("fusions", [])
    if not fusions:
        return []
    out = [
        "### Ledger: unfused -> fused on the simulator",
        "",
        "| site | nodes | cycles | bytes moved | E x b | table / param loads | |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for e in fusions:
        g = e.get
        unit = g("cost_basis", "bytes")
        verdict = (
            f"**costs more** ({-g('saved', 0):,} {unit})"
            if g("costs_more")
            else f"saves {g('saved', 0):,} {unit}"
        )
        out.append(
            f"| {_cell(g('site'))} | {_cell(', '.join(g('onnx_nodes', ())))} | "
            f"{_num(g('cycles_before'))} -> {_num(g('cycles_after'))} | "
            f"{_num(g('bytes_moved_before'))} -> {_num(g('bytes_moved_after'))} | "
            f"{_num(g('expected_bytes'))} | {g('table_loads_before', 0)}/"
            f"{g('param_loads_before', 0)} -> {g('table_loads_after', 0)}/"
            f"{g('param_loads_after', 0)} | {verdict} |"
        )
    total = (ledger or {}).get("total")
    if total:
        costly = ", ".join(total.get("costing_more", ())) or "none"
        out += [
            "",
            f"Model total: the fusions save {total.get('saved', 0):,} "
            f"{total.get('cost_basis', 'bytes')}; costing more than they save: {costly}.",
        ]
    return out + [""]


def render(r: Report) -> str:
    """The report as GitHub-flavoured markdown (trailing newline)."""
    s = r.summary
    ref = (r.reference or {}).get("name", "?")
    lines = [
        f"### Fusion check: {_code(r.model)}",
        "",
        f"{s.candidates} candidates: **{s.proven} proven**, **{s.refuted} refuted**, "
        f"{s.unknown} unknown, {s.rejected} rejected · policy {_code(r.policy)} · "
        f"target {_code(r.target)} · reference {_code(ref)}",
        "",
        "| site | pattern | nodes | verdict | reason | ms |",
        "|---|---|---|---|---|---:|",
        *[_site_row(x) for x in r.sites],
        "",
    ]
    refuted = [x for x in r.sites if x.verdict is Status.REFUTED]
    if refuted:
        lines += ["### Counterexamples", ""]
        for x in refuted:
            lines += _counterexample(x)
    lines += _checks(r.sites)
    lines += _ledger(r.ledger)
    for f in r.findings:
        lines += [f"> **{_cell(f.get('code', 'finding'))}**: {_cell(f.get('message', ''))}", ""]
    if r.host_ops:
        lines += [
            "### Kept on the host",
            "",
            "| code | nodes | message | action |",
            "|---|---|---|---|",
        ]
        lines += [_host_row(h) for h in r.host_ops]
        lines.append("")
    if r.proof_misses:
        lines += [f"Proof gate: {len(r.proof_misses)} obligation(s) without a trusted record.", ""]
    return "\n".join(lines).rstrip("\n") + "\n"
