"""Packaging: `python -m prover` / `python -m npuc`, one version everywhere, a license."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import compiler
import npu_backend
import prover

ROOT = Path(__file__).resolve().parent.parent


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


@pytest.mark.parametrize("module", ["prover", "npuc"])
def test_python_dash_m_runs_the_command(module: str) -> None:
    r = _run("-m", module, "--version")
    assert r.returncode == 0 and r.stdout.strip() == f"{module} {prover.__version__}", r
    bad = _run("-m", module, "--no-such-option")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_one_version_and_the_metadata_says_it() -> None:
    assert compiler.__version__ == npu_backend.__version__ == prover.__version__
    meta = metadata.metadata("npu-fusion-prover")
    assert meta["Version"] == prover.__version__
    assert meta["License-Expression"] == "MIT" and (ROOT / "LICENSE").is_file()
    assert meta["Summary"] and meta["Requires-Python"]
