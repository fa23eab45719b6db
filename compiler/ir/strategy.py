"""The schedule strategies: when a fused site's scheduling structure is decided.

The enum lives with the configuration it is part of (`CompileConfig.schedule_strategy`);
what each strategy does is `compiler.passes.schedule_strategy`.
"""

from __future__ import annotations

from enum import StrEnum


class ScheduleStrategy(StrEnum):
    """`early`: query the target before proving; `alternatives`: prove, then keep the unfused
    alternative where the fused form's structure cannot be generated; `late`: schedule the
    unfused graph first, then fuse knowing the structure."""

    EARLY = "early"
    ALTERNATIVES = "alternatives"
    LATE = "late"


DEFAULT_STRATEGY = ScheduleStrategy.EARLY


def parse_strategy(text: str | ScheduleStrategy | None) -> ScheduleStrategy:
    """The strategy named by `text` (None: the default); ValueError naming the choices."""
    if text is None:
        return DEFAULT_STRATEGY
    try:
        return ScheduleStrategy(text)
    except ValueError:
        choices = ", ".join(s.value for s in ScheduleStrategy)
        raise ValueError(f"unknown schedule strategy {text!r} (choose {choices})") from None
