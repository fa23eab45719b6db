"""Modules imported on first use, so start-up pays only for what a run needs.

`z3 = lazy_module("z3")` binds a stand-in; the first attribute read imports the
module (Z3 costs about 20-30 ms to import; a `prover check` decided by segments
never touches it). Type checkers see the real module through `TYPE_CHECKING`.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """Stand-in for a module, imported on the first attribute access."""

    __slots__ = ("_name", "_module")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        mod = self._module
        if mod is None:
            mod = self._module = importlib.import_module(self._name)
        return getattr(mod, attr)

    def __repr__(self) -> str:
        state = "imported" if self._module is not None else "not imported yet"
        return f"<lazy module {self._name!r} ({state})>"


def lazy_module(name: str) -> Any:
    """A stand-in for module `name` that imports it when first used."""
    return LazyModule(name)
