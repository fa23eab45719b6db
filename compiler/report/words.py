"""Counted nouns in report lines: "1 candidate", "2 candidates", "1 entry"."""

from __future__ import annotations


def plural(n: int, noun: str, many: str | None = None) -> str:
    """`n` and `noun`, in the plural (`many`, else noun + "s") unless n is 1."""
    return f"{n} {noun if n == 1 else (many or noun + 's')}"
