"""The zoo's HTML dashboard: one self-contained page (inline CSS; no scripts, fonts or
network), one row per task (verdict counts, NPU share of MACs, changes against the
baseline, time), the totals and obligation figures above, every change below."""

from __future__ import annotations

from html import escape
from typing import Any

from prover.verdict import Status

VERDICTS = tuple(str(v) for v in Status)

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:1.4em}table{border-collapse:collapse;margin:1em 0}
th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left}td.n{text-align:right}
th{background:#f3f3f3}.bar{display:inline-block;height:.8em;background:#4a8;vertical-align:middle}
.worse{background:#fde2e2}.err{background:#fff1cc}.ok{color:#286}.bad{color:#b22;font-weight:bold}
ul.summary{list-style:none;padding:0}
"""


def _share(t: dict[str, Any]) -> str:
    s = t["npu_share"]
    if s is None:
        return "-"
    return f'<span class="bar" style="width:{s * 60:.0f}px"></span> {s:.0%}'


def _row(t: dict[str, Any], with_baseline: bool) -> str:
    sm = t["summary"]
    cls = "worse" if t["worse"] else ("err" if t["status"] != "checked" else "")
    model = escape(t["model"])
    if t["status"] != "checked":
        model += (
            f'<br><span class="bad">{escape(t["status"])}</span>: {escape(t.get("reason", ""))}'
        )
    changes = "-"
    if with_baseline:
        changes = f"{t['changes']}" + (
            f' (<span class="bad">{t["worse"]} worse</span>)' if t["worse"] else ""
        )
    cells = [
        model,
        escape(t["target"]),
        escape(t["policy"]),
        escape(t["reference"]),
        *(f'<td class="n">{sm[k]}</td>' for k in VERDICTS),
        _share(t),
        changes,
        f'<td class="n">{t["time_s"]:.2f} s</td>',
    ]
    tds = "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in cells)
    return f'<tr class="{cls}">{tds}</tr>'


def render(data: dict[str, Any], headline: list[str]) -> str:
    """The dashboard of a zoo report (`report.zoo_json`); `headline`: its summary lines."""
    s = data["summary"]
    ok = s["exit_code"] == 0
    verdict = "passed" if ok else f"exit {s['exit_code']}"
    b = data.get("baseline")
    rows = "\n".join(_row(t, b is not None) for t in data["tasks"])
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Zoo gate</title>",
        f"<style>{CSS}</style></head><body>",
        f'<h1>Zoo gate: <span class="{"ok" if ok else "bad"}">{escape(verdict)}</span></h1>',
        '<ul class="summary">' + "".join(f"<li>{escape(h)}</li>" for h in headline) + "</ul>",
        "<table><tr><th>model</th><th>target</th><th>policy</th><th>reference</th><th>proven</th>"
        "<th>refuted</th><th>unknown</th><th>rejected</th><th>NPU share of MACs</th>"
        "<th>changes</th><th>time</th></tr>",
        rows,
        "</table>",
    ]
    if b is not None:
        parts.append(f"<h2>Changes against {escape(b['file'])}</h2>")
        if not b["changes"]:
            parts.append("<p>None.</p>")
        else:
            items = "".join(
                f'<li class="{"worse" if c["worse"] else ""}">'
                f"{'<b>worse</b>' if c['worse'] else 'change'} <code>{escape(c['kind'])}</code> "
                f"{escape(c['where'])}: {escape(c['message'])}</li>"
                for c in b["changes"]
            )
            parts.append(f"<ul>{items}</ul>")
    parts.append(f"<p>{escape(data['tool']['name'])} {escape(data['tool']['version'])}</p>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
