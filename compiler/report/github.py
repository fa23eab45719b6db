"""GitHub Actions report: one workflow-command annotation per finding (`--format github`).

Printed to a step's stdout, each `::error file=...,title=...::message` line becomes an
annotation on the model file in the run's summary and the pull request: refuted sites, proof
records the read-only gate misses and changes for the worse against a baseline are errors;
unknown sites and findings (float compute, reference divergence) are warnings, a float
compute finding an error when the gate fails on it; rejected sites and ops kept on the host
are notices (one per reason code). Proven sites print nothing. The last line is a plain summary.

Names and messages come from the model file: they are made inert (`inert.visible`) and then
escaped as the Actions toolkit escapes command data and properties, so no model text can
start a workflow command of its own (every command starts a line; no newline survives).
"""

from __future__ import annotations

from pathlib import Path

from compiler.report.inert import visible
from compiler.report.model import Diagnostic, Report, SiteReport, Status
from compiler.report.text import counterexample_summary

HOST_NAMES = 10  # ops named per host notice
_LEVEL = {Status.REFUTED: "error", Status.UNKNOWN: "warning", Status.REJECTED: "notice"}


def escape_data(text: str) -> str:
    """A command's message: `%`, CR and LF percent-encoded (the toolkit's `escapeData`)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A command's property value: as data, and `:` and `,` too (`escapeProperty`)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(level: str, file: str, title: str, message: str) -> str:
    """One workflow-command line, e.g. `::error file=m.onnx,title=...::message`."""
    props = f"file={escape_property(visible(file))},title={escape_property(visible(title))}"
    return f"::{level} {props}::{escape_data(visible(message))}"


def annotation_path(model: str) -> str:
    """The model as the workflow's checkout names it: relative to the current directory
    when below it (annotations attach to repository paths), else as given."""
    p = Path(model)
    try:
        return p.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return model


def _site(s: SiteReport, file: str) -> str:
    title = f"prover: {s.verdict.value} {s.pattern} ({', '.join(s.nodes)})"
    if s.verdict is Status.REFUTED and s.counterexample is not None:
        message = f"counterexample {counterexample_summary(s.counterexample)}"
    else:
        message = s.reason.message if s.reason is not None else s.verdict.value
    if s.reason is not None and s.reason.action:
        message += f". Action: {s.reason.action}"
    if s.reason is not None and s.reason.code.value != s.verdict.value:
        title += f" [{s.reason.code.value}]"
    return command(_LEVEL[s.verdict], file, title, message)


def _host_notices(host_ops: list[Diagnostic], file: str) -> list[str]:
    """One notice per reason code of the ops kept on the host (a large model keeps many,
    and GitHub shows only the first few annotations of a step): the first op's message,
    the names of the others, the action."""
    by_code: dict[str, list[Diagnostic]] = {}
    for h in host_ops:
        by_code.setdefault(h.code.value, []).append(h)
    out = []
    for code, ops in by_code.items():
        n = len(ops)
        message = ops[0].message
        if n > 1:
            others = [name for h in ops[1:] for name in h.nodes]
            shown = ", ".join(others[:HOST_NAMES])
            more = f" and {len(others) - HOST_NAMES} more" if len(others) > HOST_NAMES else ""
            message += f"; also on the host for this reason: {shown}{more}"
        if ops[0].action:
            message += f". Action: {ops[0].action}"
        title = f"prover: {n} op{'' if n == 1 else 's'} on the host [{code}]"
        out.append(command("notice", file, title, message))
    return out


def lines(r: Report) -> list[str]:
    """The annotations of one report, then its summary line."""
    file = annotation_path(r.model)
    out = [_site(s, file) for s in r.sites if s.verdict is not Status.PROVEN]
    for miss in r.proof_misses:
        out.append(command("error", file, "prover: proof gate: no trusted record", miss))
    for f in r.findings:
        gate = r.require_quantized and f is r.float_compute
        out.append(
            command("error" if gate else "warning", file, f"prover: {f['code']}", f["message"])
        )
    out += _host_notices(r.host_ops, file)
    for c in (r.baseline or {}).get("changes", []):
        if c.get("worse"):
            out.append(command("error", file, f"prover: worse than baseline ({c['kind']})",
                               f"{c['where']}: {c['message']}"))  # fmt: skip
    s = r.summary
    out.append(
        f"prover: {visible(file)}: {s.candidates} candidate{'' if s.candidates == 1 else 's'}: "
        f"{s.proven} proven, {s.refuted} refuted, {s.unknown} unknown, {s.rejected} rejected"
    )
    return out


def render(r: Report) -> str:
    """The annotations as text, one workflow command per line."""
    return "\n".join(lines(r)) + "\n"
