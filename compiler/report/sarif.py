"""SARIF 2.1.0 report: one result per refuted, unknown or rejected site.

`ruleId` is the site's reason code; every rule used is listed in
`tool.driver.rules`. The model file is the result's physical location, the ONNX
node names its logical locations.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compiler.report.inert import visible
from compiler.report.model import REASON_CODES, Diagnostic, Report, SiteReport, Status
from compiler.report.text import counterexample_summary

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {Status.REFUTED: "error", Status.UNKNOWN: "warning", Status.REJECTED: "note"}


def _rule(code: str) -> dict[str, Any]:
    text = REASON_CODES.get(code, f"Site not fused: {code}.")
    return {
        "id": code,
        "name": "".join(p.capitalize() for p in code.split("_")) or "Unnamed",
        "shortDescription": {"text": text},
        "fullDescription": {"text": text},
        "help": {"text": f"{text} See the reason codes in DESIGN.md."},
    }


def _artifact_uri(model: str) -> tuple[str, str | None]:
    """A relative URI under %SRCROOT% when the model is below the current directory."""
    p = Path(model)
    try:
        rel = p.resolve().relative_to(Path.cwd().resolve())
        return rel.as_posix(), "%SRCROOT%"
    except ValueError:
        return p.resolve().as_uri(), None


def _locations(uri: str, base: str | None, scope: str, nodes: Sequence[str]) -> list[dict]:
    """The one SARIF location of a result: the model file and its ONNX nodes under `scope`."""
    loc: dict[str, Any] = {"uri": uri}
    if base:
        loc["uriBaseId"] = base
    return [
        {
            "physicalLocation": {"artifactLocation": loc},
            "logicalLocations": [
                {"name": n, "kind": "function", "fullyQualifiedName": f"{scope}/{n}"} for n in nodes
            ],
        }
    ]


def _result(s: SiteReport, rule_index: int, uri: str, base: str | None) -> dict[str, Any]:
    code = _code(s)
    text = f"{s.verdict.value}: {s.pattern} ({', '.join(s.nodes)})"
    if s.reason is not None:
        text += f": {s.reason.message}"
        if s.reason.action:
            text += f" Action: {s.reason.action}."
    if s.verdict is Status.REFUTED and s.counterexample is not None:
        text += f"; counterexample {counterexample_summary(s.counterexample)}"
    props: dict[str, Any] = {"verdict": s.verdict.value, "site": s.id, "nodes": list(s.nodes)}
    if s.reason is not None and s.reason.action:
        props["action"] = s.reason.action
    if s.obligation_hash:
        props["obligation"] = s.obligation_hash
    if s.counterexample is not None and s.counterexample.npz:
        props["counterexampleFile"] = s.counterexample.npz
    return {
        "ruleId": code,
        "ruleIndex": rule_index,
        "level": _LEVEL[s.verdict],
        "message": {"text": visible(text)},  # shown to people; the locations keep names exact
        "locations": _locations(uri, base, s.id, s.nodes),
        "partialFingerprints": {"siteId/v1": f"{s.pattern}:{','.join(s.nodes)}:{code}"},
        "properties": props,
    }


def _host_result(h: Diagnostic, rule_index: int, uri: str, base: str | None) -> dict:
    """A note-level result for one op kept on the host (its ONNX nodes as locations)."""
    text = h.message + (f" Action: {h.action}." if h.action else "")
    return {
        "ruleId": h.code.value,
        "ruleIndex": rule_index,
        "level": "note",
        "message": {"text": visible(text)},
        "locations": _locations(uri, base, "host", h.nodes),
        "partialFingerprints": {"hostOp/v1": f"{','.join(h.nodes)}:{h.code}"},
        "properties": {"action": h.action},
    }


def _code(s: SiteReport) -> str:
    return s.reason.code.value if s.reason else s.verdict.value


def sarif_log(r: Report) -> dict[str, Any]:
    """The report as a SARIF 2.1.0 log object."""
    uri, base = _artifact_uri(r.model)
    flagged = [s for s in r.sites if s.verdict is not Status.PROVEN]
    codes: list[str] = []
    for s in flagged:
        if _code(s) not in codes:
            codes.append(_code(s))
    results = [_result(s, codes.index(_code(s)), uri, base) for s in flagged]
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "prover",
                "version": r.tool_version or "0",
                "rules": [_rule(c) for c in codes],
            }
        },
        "artifacts": [{"location": dict({"uri": uri}, **({"uriBaseId": base} if base else {}))}],
        "results": results,
        "properties": {"policy": r.policy, "target": r.target, "summary": vars(r.summary)},
    }
    if r.reference is not None:
        run["properties"]["reference"] = r.reference
    if r.findings:
        run["properties"]["findings"] = r.findings
    for h in r.host_ops:
        if h.code.value not in codes:
            codes.append(h.code.value)
            run["tool"]["driver"]["rules"].append(_rule(h.code.value))
        results.append(_host_result(h, codes.index(h.code.value), uri, base))
    if base:
        run["originalUriBaseIds"] = {base: {"uri": Path.cwd().resolve().as_uri() + "/"}}
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def render(r: Report) -> str:
    """The SARIF log as indented JSON text."""
    return json.dumps(sarif_log(r), indent=2) + "\n"
