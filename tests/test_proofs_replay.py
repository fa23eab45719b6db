"""Replay every counterexample test committed under proofs/counterexamples/, forever.

`prover check MODEL --emit-tests proofs/counterexamples` writes one directory per
refuted site; committing it adds its tests here (pytest only collects tests/).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

CEX_ROOT = Path(__file__).resolve().parent.parent / "proofs" / "counterexamples"


def _cases() -> list[tuple[Path, str]]:
    out = []
    for f in sorted(CEX_ROOT.glob("*/test_*.py")):
        text = f.read_text(encoding="utf-8")
        for line in text.splitlines():
            if line.startswith("def test_"):
                out.append((f, line[len("def ") : line.index("(")]))
    return out


CASES = _cases()


def test_committed_counterexamples_exist():
    """The repository ships at least one replayed counterexample (the showcase's)."""
    assert CASES, f"no counterexample tests under {CEX_ROOT}"


@pytest.mark.parametrize(("path", "name"), CASES, ids=[f"{p.parent.name}::{n}" for p, n in CASES])
def test_replay(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(f"replay_{path.parent.name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    getattr(mod, name)()
