"""A site's `checks` (JSON) summarised for the human-readable reports (text, Markdown, HTML).

Each check becomes one headline (kind, status, counts) plus a bounded listing of its
notable items: for `requant_synthesis` the first few column groups whose outcome is
`impossible` or `refuted`, with their messages, and how many more there are. What a check
kind holds is described as data (`KINDS`); a check kind not described there is shown by
its name, status and message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .model import SiteReport, Status

LISTED = 5  # notable items shown per check; the rest are counted (all are in the JSON)


@dataclass(frozen=True)
class Kind:
    """How one check kind's JSON entry reads."""

    label: str  # what the reports call the check
    items: str  # key of the per-item list
    noun: str  # one item, singular ("column group")
    outcome: str | None = None  # key of an item's outcome (None: items have no outcome)
    order: tuple[str, ...] = ()  # outcomes in count order (others follow as they appear)
    listed: tuple[str, ...] = ()  # outcomes listed one by one with their message


KINDS: dict[str, Kind] = {
    "requant_synthesis": Kind(
        label="synthesis",
        items="groups",
        noun="column group",
        outcome="kind",
        order=("rounded", "synthesised", "impossible", "refuted"),
        listed=("impossible", "refuted"),
    ),
    "tile_columns": Kind(label="tile_columns", items="tiles", noun="column tile"),
}


@dataclass(frozen=True)
class Item:
    """One listed item: its columns ("3" or "0..7"), outcome and message."""

    columns: str
    outcome: str
    message: str

    @property
    def where(self) -> str:
        """'column 3' / 'columns 0..7'."""
        return ("columns " if ".." in self.columns else "column ") + self.columns


@dataclass(frozen=True)
class CheckSummary:
    """One check as the human-readable reports show it."""

    check: str  # the JSON name
    label: str
    status: str  # "held" | "violated"
    counts: str  # "64 column groups: 41 synthesised, 23 impossible" ('' if nothing to count)
    note: str  # what the check's message says beyond the counts ('' if nothing)
    listed: tuple[Item, ...]
    more: dict[str, int]  # notable items not listed, per outcome

    @property
    def headline(self) -> str:
        """'synthesis violated: 64 column groups: 41 synthesised, 23 impossible'."""
        return f"{self.label} {self.status}" + (f": {self.counts}" if self.counts else "")

    def more_text(self) -> str:
        """'18 more impossible' / '20 more: 15 impossible, 5 refuted' ('' when none)."""
        n = sum(self.more.values())
        if not n:
            return ""
        if len(self.more) == 1:
            return f"{n} more {next(iter(self.more))}"
        return f"{n} more: " + ", ".join(f"{v} {k}" for k, v in self.more.items())


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _span(cols: Any, half_open: bool) -> str:
    """'a..b' (inclusive) for an item's [first, last] or [start, stop) columns."""
    try:
        a, b = int(cols[0]), int(cols[-1]) - (1 if half_open else 0)
    except (TypeError, ValueError, IndexError):
        return str(cols)
    return str(a) if a == b else f"{a}..{b}"


def summarise(check: dict[str, Any], limit: int = LISTED) -> CheckSummary:
    """The summary of one JSON check entry (at most `limit` items listed)."""
    name = str(check.get("check", "check"))
    kind = KINDS.get(name)
    status = str(check.get("status", "?"))
    message = str(check.get("message", "") or "")
    if kind is None:
        return CheckSummary(name, name, status, "", message, (), {})
    items = list(check.get(kind.items) or ())
    counts = _plural(len(items), kind.noun) if items else ""
    listed: list[Item] = []
    more: dict[str, int] = {}
    if kind.outcome is None:  # tile_columns: the tiles' span and the step's structure
        if items:
            counts += f" over columns {_span((items[0][0], items[-1][-1]), True)}"
        if check.get("structure"):
            counts += f" ({check['structure']})" if counts else str(check["structure"])
    else:
        seen: dict[str, int] = {k: 0 for k in kind.order}
        for it in items:
            o = str(it.get(kind.outcome, "?"))
            seen[o] = seen.get(o, 0) + 1
            if o in kind.listed:
                if len(listed) < limit:
                    cols = _span(it.get("columns", ()), False)
                    listed.append(Item(cols, o, str(it.get("message", ""))))
                else:
                    more[o] = more.get(o, 0) + 1
        more = {k: more[k] for k in seen if k in more}  # in count order
        parts = [f"{n} {k}" for k, n in seen.items() if n]
        if parts:
            counts += ": " + ", ".join(parts)
    return CheckSummary(
        name, kind.label, status, counts, _beyond(message, counts), tuple(listed), more
    )


def _beyond(message: str, counts: str) -> str:
    """The part of a check's message that the counts do not already say."""
    if counts and counts in message:
        return message.split(counts, 1)[1].lstrip(";,. ").strip()
    return message.strip()


_NUMBER = re.compile(r"-?\d+")


def refuted_reason(s: SiteReport) -> str:
    """A refuted site's reason when it says more than its counterexample, else ''.

    A refutation's reason reads '<the refutation>; <what else is known>; ...'. It says
    nothing more when it is one clause naming both the original and the fused value of the
    counterexample; otherwise (e.g. why no fixed-point parameters exist, a remedy) the
    whole reason is returned, its first clause giving the others their context."""
    if s.verdict is not Status.REFUTED or s.reason is None or s.counterexample is None:
        return ""
    message = s.reason.message.strip()
    if message == f"site {s.id} was {s.verdict.value}":  # SiteReport's placeholder
        return ""
    clauses = [c for c in message.split("; ") if c.strip()]
    c = s.counterexample
    if len(clauses) == 1 and c.before is not None and c.after is not None:
        if {str(c.before), str(c.after)} <= set(_NUMBER.findall(clauses[0])):
            return ""
    return message


def of_site(s: SiteReport, limit: int = LISTED) -> list[CheckSummary]:
    """The summaries of a site's checks, in the JSON's order."""
    return [summarise(c, limit) for c in s.checks]
