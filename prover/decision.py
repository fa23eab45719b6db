"""The raw answer of one decision procedure, before replay and lifting."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Outcome(StrEnum):
    """What one procedure found. Not a `prover.verdict.Status`: `violated` becomes
    `refuted` only once the witness replays (`counterexample.replay`), `holds` becomes
    `proven` only once the procedures asked agree (`prover.api.check`)."""

    HOLDS = "holds"
    VIOLATED = "violated"
    UNKNOWN = "unknown"


HOLDS, VIOLATED, UNKNOWN = Outcome.HOLDS, Outcome.VIOLATED, Outcome.UNKNOWN


@dataclass
class Decision:
    """`holds` (proof), `violated` (with a witness assignment) or `unknown`.

    `minimal` says the witness is the canonical simplest violating assignment
    (see `counterexample.rank_key`); `max_diff` is the exact largest output
    difference over the domain when the procedure computed it, else None.
    """

    status: Outcome  # a str is accepted and converted
    procedure: str
    version: str = ""
    witness: dict[str, int] | None = None
    minimal: bool = False
    max_diff: int | None = None
    reason: str = ""
    time_ms: float = 0.0
    stats: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.status = Outcome(self.status)

    def violation(self) -> dict[str, int]:
        """The witness of a `violated` decision (a ValueError if there is none)."""
        if self.witness is None:
            raise ValueError(f"{self.procedure}: a {self.status} decision has no witness")
        return self.witness

    @property
    def decisive(self) -> bool:
        return self.status in (HOLDS, VIOLATED)
