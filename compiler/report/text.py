"""Human-readable report: one line per site (then its indented details: reason, checks)
and a summary line."""

from __future__ import annotations

from compiler.report.checks import of_site, refuted_reason
from compiler.report.inert import visible
from compiler.report.model import Diagnostic, Report, SiteReport, Status, WholeModelCounterexample

_MARK = {
    Status.PROVEN: "PROVEN  ",
    Status.REFUTED: "REFUTED ",
    Status.UNKNOWN: "UNKNOWN ",
    Status.REJECTED: "REJECTED",
}


def counterexample_summary(c: WholeModelCounterexample) -> str:
    """A short one-line description of a counterexample."""
    parts = []
    if c.assignment:
        local = ", ".join(f"{k}={v}" for k, v in sorted(c.assignment.items()))
        ba = ""
        if c.before is not None and c.after is not None:
            ba = f": original {c.before}, fused {c.after}"
        elif c.before is not None:  # an NPU-side precondition fails: no fused value exists
            ba = f": original {c.before}, fused undefined"
        parts.append(f"at {local}{ba}")
    diffs = c.differing()
    if diffs:
        name, idx, exp, act = diffs[0]
        more = f" (+{len(diffs) - 1} more)" if len(diffs) > 1 else ""
        where = ",".join(str(i) for i in idx)
        parts.append(f"{name}[{where}] expected {exp} got {act}{more}")
    if c.inputs:
        shapes = ", ".join(
            f"{k} {'x'.join(str(d) for d in v.shape) or 'scalar'} {v.dtype}"
            for k, v in c.inputs.items()
        )
        parts.append(f"inputs: {shapes}")
    if c.npz:
        parts.append(f"saved {c.npz}")
    return "; ".join(parts) if parts else "counterexample recorded"


def site_line(s: SiteReport) -> str:
    """One line: verdict, pattern, nodes, reason or counterexample, time."""
    detail = ""
    if s.verdict is Status.REFUTED and s.counterexample is not None:
        detail = f"  counterexample {counterexample_summary(s.counterexample)}"
    elif s.reason is not None and s.verdict is not Status.PROVEN:
        detail = f"  [{s.reason.code}] {s.reason.message}"
        if s.reason.action:
            detail += f"; action: {s.reason.action}"
    elif s.max_diff is not None and s.max_diff > 0:
        detail = f"  max difference {s.max_diff}"
    nodes = ",".join(s.nodes)
    return f"{_MARK[s.verdict]} {s.pattern}  ({nodes}){detail}  {s.time_ms:.0f} ms"


INDENT = " " * 9  # under the pattern, past the verdict mark


def site_details(s: SiteReport) -> list[str]:
    """Indented lines under a site's line: a refuted site's reason when it says more than
    the counterexample, then per check one summary line and its first notable items."""
    lines = []
    why = refuted_reason(s)
    if why:
        lines.append(f"{INDENT}reason: {why}")
    for c in of_site(s):
        lines.append(f"{INDENT}{c.headline}" + (f"; {c.note}" if c.note else ""))
        lines += [f"{INDENT}  {i.where} {i.outcome}: {i.message}" for i in c.listed]
        if c.more:
            lines.append(f"{INDENT}  ... {c.more_text()} (see --format json)")
    return lines


def host_line(h: Diagnostic) -> str:
    """One line per op kept on the host: code, message, action."""
    action = f"; action: {h.action}" if h.action else ""
    return f"HOST     [{h.code}] {h.message}{action}"


def render(r: Report) -> str:
    """The whole text report, header to summary, with a trailing newline; names and
    messages from the model show their control characters escaped (`inert.visible`)."""
    head = f"{r.model}: policy {r.policy}, target {r.target}"
    if r.reference is not None:
        head += f", reference {r.reference['name']} ({r.reference['summary']})"
    lines = [head]
    for x in r.sites:
        lines += [site_line(x), *site_details(x)]
    if not r.sites:
        lines.append("no candidate sites")
    lines += [f"FINDING  [{f['code']}] {f['message']}" for f in r.findings]
    lines += [host_line(h) for h in r.host_ops]
    s = r.summary
    lines.append(
        f"{s.candidates} candidates: {s.proven} proven, {s.refuted} refuted, "
        f"{s.unknown} unknown, {s.rejected} rejected"
    )
    return "\n".join(map(visible, lines)) + "\n"
