"""Equivalence policies: `bitwise` (equal everywhere) and `bounded:N` (|before-after| <= N)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_BOUNDED = re.compile(r"bounded:(\d+)")


@dataclass(frozen=True)
class Policy:
    """The tolerance allowed between `before` and `after`: 0 is bitwise."""

    bound: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.bound, int) or isinstance(self.bound, bool) or self.bound < 0:
            raise ValueError(f"policy bound must be a non-negative integer, got {self.bound!r}")

    @property
    def kind(self) -> str:
        return "bitwise" if self.bound == 0 else "bounded"

    @classmethod
    def parse(cls, text: str) -> Policy:
        """Parse `bitwise` or `bounded:N` (N a non-negative integer)."""
        if not isinstance(text, str):
            raise ValueError(f"policy must be a string, got {type(text).__name__}")
        t = text.strip()
        if t == "bitwise":
            return cls(0)
        m = _BOUNDED.fullmatch(t)
        if m is None:
            raise ValueError(f"bad policy {text!r}: expected 'bitwise' or 'bounded:N' with N >= 0")
        return cls(int(m.group(1)))

    def allows(self, diff: int) -> bool:
        """True when an absolute output difference `diff` is within the policy."""
        return diff <= self.bound

    def __str__(self) -> str:
        return "bitwise" if self.bound == 0 else f"bounded:{self.bound}"
