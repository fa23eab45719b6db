"""The zoo's aggregated report: one JSON document (schema `compiler/zoo/schema.json`), and
its text, markdown and HTML (`compiler.zoo.html`) renderings (one row per task: verdict counts, NPU share of MACs,
changes against the baseline, time).

Exit code of the whole zoo: 6 if anything got worse against `--baseline`; else, over the
tasks, 1 if a site is refuted, 2 if a model could not be checked (bad input), 5 on a
read-only proof-gate miss, 3 if anything is unknown (a site, or a task that died or
timed out twice), 0 otherwise. A run with any task not checked or any site unknown is
never `complete`.
"""

from __future__ import annotations

import json
from collections import Counter
from importlib import resources
from typing import Any

from compiler.report.model import ExitCode, Status
from compiler.zoo.baseline import Change, npu_share, worse
from compiler.zoo.run import ZooRun

SCHEMA_VERSION = 1  # of compiler/zoo/schema.json
VERDICTS = tuple(str(v) for v in Status)  # the summary keys, in the reports' order
# over the tasks: the first code present wins (a task code not listed still fails the zoo)
PRECEDENCE = (
    ExitCode.REFUTED,
    ExitCode.BAD_INPUT,
    ExitCode.PROOF_MISSING,
    ExitCode.FLOAT_COMPUTE,
    ExitCode.UNKNOWN,
)


def obligation_figures(run: ZooRun) -> dict[str, Any]:
    """How obligations recurred across tasks and how each distinct one was answered.

    `occurrences`: one per task relying on one; `distinct`: their hashes; `shared`: hashes
    several tasks rely on; `decided` / `served` / `errors`: how the deciding phase answered
    each distinct hash, once (`speculative`: answered for a model's provisional path that
    its final run did not take); `inline`: decided inside a model run (a refutation's
    lifting, a model past its collecting runs, or a family of identities); `identities`:
    the families of identities among them (proven where they are built, never deferred)."""
    seen: Counter[str] = Counter()
    for o in run.outcomes:
        seen.update(o.result["obligations"].keys())
    answers = Counter(run.answers.values())
    inline = {h for o in run.outcomes for h in o.result["obligations"] if h not in run.answers}
    identities = {
        h for o in run.outcomes for h, a in o.result["obligations"].items() if a == "identity"
    }
    occurrences = sum(seen.values())
    distinct = len(seen)
    return {
        "occurrences": occurrences,
        "distinct": distinct,
        "shared": sum(1 for n in seen.values() if n > 1),
        "decided": answers["decided"],
        "served": answers["served"],
        "errors": answers["error"],
        "speculative": sum(1 for h in run.answers if h not in seen),
        "inline": len(inline),
        "identities": len(identities),
        "dedup_ratio": round(occurrences / distinct, 4) if distinct else 1.0,
    }


def zoo_exit_code(run: ZooRun, changes: list[Change]) -> ExitCode:
    if worse(changes):
        return ExitCode.WORSE
    codes = {int(o.result["exit_code"]) for o in run.outcomes}
    for c in PRECEDENCE:
        if int(c) in codes:
            return c
    failed = sorted(c for c in codes if c != ExitCode.OK)
    return ExitCode(failed[0]) if failed else ExitCode.OK


def _task_json(o: Any, changes: list[Change], where: str) -> dict[str, Any]:
    r = o.result
    rep = r.get("report")
    counts = {v: 0 for v in VERDICTS}
    if rep is not None:
        for v in VERDICTS:
            counts[v] = int(rep["summary"][v])
    mine = [c for c in changes if c.where == where or c.where.startswith(where + " ")]
    out: dict[str, Any] = {
        **o.spec.to_json(),
        "status": o.status,
        "exit_code": int(r["exit_code"]),
        "attempts": o.attempts,
        "time_s": round(float(r["time_s"]), 4),
        "summary": {"candidates": sum(counts.values()), **counts},
        "npu_share": None if rep is None else npu_share(rep),
        "obligations": len(r["obligations"]),
        "changes": sum(1 for c in mine),
        "worse": sum(1 for c in mine if c.worse),
    }
    if r.get("reason"):
        out["reason"] = r["reason"]
    if rep is not None:
        out["report"] = rep
    return out


def where_of(o: Any) -> str:
    from compiler.zoo.baseline import _where

    return _where(o.spec.key)


def zoo_json(
    run: ZooRun, changes: list[Change] | None = None, baseline: str | None = None
) -> dict[str, Any]:
    """The whole zoo report as a JSON-ready dict."""
    from compiler.cli.common import tool_version

    changes = changes or []
    tasks = [_task_json(o, changes, where_of(o)) for o in run.outcomes]
    totals = {v: sum(t["summary"][v] for t in tasks) for v in VERDICTS}
    status = Counter(t["status"] for t in tasks)
    complete = all(t["status"] == "checked" for t in tasks) and not totals["unknown"]
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "zoo",
        "tool": {"name": "prover", "version": tool_version()},
        "summary": {
            "tasks": len(tasks),
            "checked": status["checked"],
            "errors": status["error"],
            "unknown_tasks": status["unknown"],
            "candidates": sum(totals.values()),
            **totals,
            "complete": complete,
            "exit_code": int(zoo_exit_code(run, changes)),
        },
        "obligations": obligation_figures(run),
        "engine": {
            "scheduler": run.scheduler,
            "workers": run.workers,
            "wall_s": round(run.wall_s, 3),
            "store": run.store,
            "model_runs": run.model_runs,
            "dask_tasks": run.dask_tasks,
        },
        "tasks": tasks,
    }
    if run.notes:
        out["notes"] = list(run.notes)
    if baseline is not None:
        out["baseline"] = {"file": baseline, "changes": [c.to_json() for c in changes]}
    return out


def schema() -> dict[str, Any]:
    """The shipped JSON schema of the zoo report (compiler/zoo/schema.json)."""
    text = resources.files("compiler.zoo").joinpath("schema.json").read_text("utf-8")
    return json.loads(text)


def render_json(data: dict[str, Any], indent: int | None = None) -> str:
    from compiler.report.json_form import dumps

    return dumps(data, indent)


def _share(t: dict[str, Any]) -> str:
    s = t["npu_share"]
    return "-" if s is None else f"{s:.0%}"


def _counts(t: dict[str, Any]) -> str:
    s = t["summary"]
    return ", ".join(f"{s[v]} {v}" for v in VERDICTS)


def _state(t: dict[str, Any]) -> str:
    if t["status"] != "checked":
        return t["status"].upper()
    return "ok" if t["exit_code"] == 0 else f"exit {t['exit_code']}"


def headline(data: dict[str, Any]) -> list[str]:
    """The summary lines every format starts or ends with: tasks, obligations, engine."""
    s, ob, eng = data["summary"], data["obligations"], data["engine"]
    lines = [
        f"{s['tasks']} task(s) ({s['checked']} checked, {s['errors']} error, "
        f"{s['unknown_tasks']} unknown): {s['candidates']} candidates: {s['proven']} proven, "
        f"{s['refuted']} refuted, {s['unknown']} unknown, {s['rejected']} rejected"
        + ("" if s["complete"] else "; INCOMPLETE"),
        f"obligations: {ob['occurrences']} over all tasks, {ob['distinct']} distinct, "
        f"{ob['shared']} shared by several tasks (dedup ratio {ob['dedup_ratio']:.2f}); "
        f"each decided once: {ob['decided']} decided, {ob['served']} served from the store, "
        f"{ob['errors']} error(s)"
        + (f", {ob['inline']} decided in a model run" if ob["inline"] else ""),
        f"{eng['workers']} worker(s) on {eng['scheduler']}, {eng['wall_s']:.1f} s; "
        f"exit {s['exit_code']}",
    ]
    return lines + [f"note: {n}" for n in data.get("notes", [])]


def render_text(data: dict[str, Any]) -> str:
    """One line per task, then the changes against the baseline, then the totals."""
    lines = []
    for t in data["tasks"]:
        lines.append(
            f"{_state(t):<8} {t['model']}  [{t['target']}, {t['policy']}, {t['reference']}]  "
            f"{_counts(t)}  NPU {_share(t)}  {t['time_s']:.2f} s"
            + (f"  {t['worse']} worse" if t["worse"] else "")
            + (f"  ({t['reason']})" if t.get("reason") else "")
        )
    b = data.get("baseline")
    if b is not None:
        lines.append(f"against baseline {b['file']}: {len(b['changes'])} change(s)")
        lines += [
            f"  {'WORSE' if c['worse'] else 'change'}: {c['where']}: {c['message']}"
            for c in b["changes"]
        ]
    return "\n".join(lines + headline(data)) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(data: dict[str, Any]) -> str:
    """A pull-request comment: the totals, one table row per task, then every change."""
    s = data["summary"]
    verdict = "passed" if s["exit_code"] == 0 else f"exit {s['exit_code']}"
    out = [f"## Zoo gate: {verdict}", ""]
    out += [f"- {line}" for line in headline(data)]
    out += [
        "",
        "| model | target | policy | reference | proven | refuted | unknown | rejected "
        "| NPU share | changes | time |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for t in data["tasks"]:
        sm = t["summary"]
        model = _md(t["model"])
        if t["status"] != "checked":
            model += f" **{t['status']}**: {_md(t.get('reason', ''))}"
        ch = "-" if "baseline" not in data else f"{t['changes']} ({t['worse']} worse)"
        if t["worse"]:
            ch = f"**{ch}**"
        out.append(
            f"| {model} | {t['target']} | {t['policy']} | {t['reference']} | {sm['proven']} "
            f"| {sm['refuted']} | {sm['unknown']} | {sm['rejected']} | {_share(t)} | {ch} "
            f"| {t['time_s']:.2f} s |"
        )
    b = data.get("baseline")
    if b is not None:
        out += ["", f"### Changes against `{_md(b['file'])}`", ""]
        if not b["changes"]:
            out.append("None.")
        out += [
            f"- {'**worse**' if c['worse'] else 'change'} `{c['kind']}` {_md(c['where'])}: "
            f"{_md(c['message'])}"
            for c in b["changes"]
        ]
    return "\n".join(out) + "\n"


def render_html(data: dict[str, Any]) -> str:
    """The HTML dashboard (`compiler.zoo.html`)."""
    from compiler.zoo import html

    return html.render(data, headline(data))
