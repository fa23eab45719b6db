"""Human-readable report: one line per site (then its indented details: reason, checks)
and a summary line."""

from __future__ import annotations

import re

from compiler.report.checks import of_site, refuted_reason
from compiler.report.inert import visible
from compiler.report.model import (
    Diagnostic,
    ReasonCode,
    Report,
    SiteReport,
    Status,
    WholeModelCounterexample,
)
from compiler.report.words import plural

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


WIDTH = 160  # a site's line (and a host op's) is cut to this many characters without -v


def clip(text: str, width: int) -> str:
    """`text` cut to `width` characters, ending in "..." when cut."""
    return text if len(text) <= width else text[: max(0, width - 3)].rstrip() + "..."


def _nodes(nodes: tuple[str, ...] | list[str], verbose: bool) -> str:
    if verbose or len(nodes) <= 3:
        return ",".join(nodes)
    return ",".join(nodes[:2]) + f",...(+{len(nodes) - 2})"


def site_line(s: SiteReport, verbose: bool = True) -> str:
    """One line: verdict, pattern, nodes, reason or counterexample, time. Without
    `verbose` it is at most `WIDTH` characters (the reason and the counterexample cut,
    the action left to -v and JSON)."""
    detail = ""
    if s.verdict is Status.REFUTED and s.counterexample is not None:
        cx = counterexample_summary(s.counterexample)
        detail = f"counterexample {cx if verbose else cx.split('; ')[0]}"
    elif s.reason is not None and s.verdict is not Status.PROVEN:
        detail = f"[{s.reason.code}] {s.reason.message}"
        if s.reason.action and verbose:
            detail += f"; action: {s.reason.action}"
    elif s.max_diff is not None and s.max_diff > 0:
        detail = f"max difference {s.max_diff}"
    head = f"{_MARK[s.verdict]} {s.pattern}  ({_nodes(s.nodes, verbose)})"
    tail = f"  {s.time_ms:.0f} ms"
    if not detail:
        return head + tail
    if not verbose:
        detail = clip(_short_hashes(detail), WIDTH - len(head) - len(tail) - 2)
    return f"{head}  {detail}{tail}"


INDENT = " " * 9  # under the pattern, past the verdict mark


def site_details(s: SiteReport, verbose: bool = True) -> list[str]:
    """Indented lines under a site's line: a refuted site's reason when it says more than
    the counterexample, then per check one summary line and its first notable items
    (without `verbose`: the reason and the checks' summary lines only, each cut to `WIDTH`)."""
    lines = []
    why = refuted_reason(s)
    if why:
        lines.append(f"{INDENT}reason: {why}")
    for c in of_site(s):
        lines.append(f"{INDENT}{c.headline}" + (f"; {c.note}" if c.note else ""))
        if not verbose:
            continue
        lines += [f"{INDENT}  {i.where} {i.outcome}: {i.message}" for i in c.listed]
        if c.more:
            lines.append(f"{INDENT}  ... {c.more_text()} (see --format json)")
    return lines if verbose else [clip(x, WIDTH) for x in lines]


_HOST_VERDICT = {  # a host op's lowering verdict, in words: it is not a candidate site's
    ReasonCode.REFUTED: "its NPU form was refuted",
    ReasonCode.UNKNOWN: "its NPU form was not decided",
    ReasonCode.PROOF_MISSING: "no trusted proof record for its NPU form (read-only gate)",
}


def host_line(h: Diagnostic, verbose: bool = True) -> str:
    """One line per op kept on the host: its nodes, why, and (verbose) the action. A
    lowering verdict is said in words ("its NPU form was refuted"), never as a bare
    [refuted] that the summary's count of refuted sites would not include."""
    nodes = ", ".join(h.nodes)
    msg = h.message
    prefix = f"{nodes} stays on the host: "
    if msg.startswith(prefix):
        msg = msg[len(prefix) :]
    said = _HOST_VERDICT.get(ReasonCode(h.code)) if h.code in set(ReasonCode) else None
    why = f"{said}: {msg}" if said else f"[{h.code}] {msg}"
    line = f"HOST     {nodes}  {why}"
    if verbose:
        action = f"; action: {h.action}" if h.action else ""
        return line + action
    return clip(line, WIDTH)


def host_lines(hosts: list[Diagnostic], verbose: bool) -> list[str]:
    """The host ops' lines; without `verbose`, more than 3 of one code are one line."""
    if verbose:
        return [host_line(h) for h in hosts]
    by_code: dict[str, list[Diagnostic]] = {}
    for h in hosts:
        by_code.setdefault(str(h.code), []).append(h)
    out = []
    for code, group in by_code.items():
        if len(group) <= 3:
            out += [host_line(h, False) for h in group]
            continue
        nodes = [n for h in group for n in h.nodes]
        shown = ", ".join(nodes[:4]) + (f", ... (+{len(nodes) - 4})" if len(nodes) > 4 else "")
        said = _HOST_VERDICT.get(ReasonCode(code)) if code in set(ReasonCode) else None
        out.append(clip(f"HOST     {said or f'[{code}]'}: {len(nodes)} ops: {shown}", WIDTH))
    return out


def finding_lines(findings: list[dict], verbose: bool) -> list[str]:
    """One line per finding; without `verbose` each cut to `WIDTH`, and more than 3 of one
    code one line (how many, and the first's message)."""
    if verbose:
        return [f"FINDING  [{f['code']}] {f['message']}" for f in findings]
    by_code: dict[str, list[dict]] = {}
    for f in findings:
        by_code.setdefault(str(f["code"]), []).append(f)
    out = []
    for code, group in by_code.items():
        if len(group) <= 3:
            out += [clip(f"FINDING  [{code}] {f['message']}", WIDTH) for f in group]
        else:
            first = group[0]["message"]
            out.append(clip(f"FINDING  [{code}] {len(group)} findings; first: {first}", WIDTH))
    return out


def summary_line(r: Report) -> str:
    """The last line: counts per verdict (and the ops kept on the host, if any)."""
    s = r.summary
    line = (
        f"{plural(s.candidates, 'candidate')}: {s.proven} proven, {s.refuted} refuted, "
        f"{s.unknown} unknown, {s.rejected} rejected"
    )
    return line


def render(r: Report, verbose: bool = False) -> str:
    """The whole text report, header to summary, with a trailing newline; names and
    messages from the model show their control characters escaped (`inert.visible`) and
    no Markdown backticks. Without `verbose` every site and host line is at most `WIDTH`
    characters, and a last hint says where the rest is."""
    head = f"{r.model}: policy {r.policy}, target {r.target}"
    if r.reference is not None:
        head += f", reference {r.reference['name']} ({r.reference['summary']})"
    lines = [head]
    for x in r.sites:
        lines += [site_line(x, verbose), *site_details(x, verbose)]
    if not r.sites:
        lines.append("no candidate sites")
    lines += finding_lines(r.findings, verbose)
    lines += host_lines(r.host_ops, verbose)
    if not verbose and (any(x.verdict is not Status.PROVEN for x in r.sites) or r.host_ops):
        lines.append("(-v: every reason in full with its action; --format json: everything)")
    lines.append(summary_line(r))
    if not verbose:
        lines = [_short_hashes(x) for x in lines]
    return "\n".join(plain(visible(x)) for x in lines) + "\n"


def _short_hashes(line: str) -> str:
    """Obligation hashes (64 hex digits) shown by their first 12, as the store names them
    in its summaries; -v and JSON keep them whole."""
    return re.sub(r"\b([0-9a-f]{12})[0-9a-f]{52}\b", r"\1", line)


def plain(line: str) -> str:
    """A line without Markdown code marks: `x` reads as 'x' on a terminal."""
    return re.sub(r"`([^`]*)`", r"'\1'", line).replace("`", "'")
