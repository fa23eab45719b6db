"""Counting the calls a test makes to a function, through pytest's monkeypatch."""

from __future__ import annotations

from typing import Any


def count_calls(monkeypatch: Any, owner: Any, name: str) -> list[tuple]:
    """Replace `owner.name` (a module's or class's attribute) for the test by a wrapper that
    records each call's positional arguments in the returned list and calls the real one."""
    calls: list[tuple] = []
    real = getattr(owner, name)

    def counted(*a: Any, **k: Any) -> Any:
        calls.append(a)
        return real(*a, **k)

    monkeypatch.setattr(owner, name, counted)
    return calls
