"""A replay test emitted before `compiler/` was split into sub-packages still runs.

`tests/data/emitted_before_layout/` holds one `prover check --emit-tests` directory written
by the code as it was before the move (showcase.onnx, site mm_lut -> sig_lut, bitwise): its
test module does `from compiler import replay`, which must keep working for users' suites.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

OLD = Path(__file__).resolve().parent / "data" / "emitted_before_layout" / "cex_cfcf7ff69439b1d8"


def run_pytest(d: Path) -> subprocess.CompletedProcess[str]:
    """Run pytest on one replay directory in its own process, as a user's suite would."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(d)],
        cwd=d.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def old_case(tmp_path: Path) -> Path:
    """A fresh copy of the pre-move replay directory."""
    d = tmp_path / OLD.name
    shutil.copytree(OLD, d)
    return d


def test_fixture_uses_the_old_import(old_case: Path):
    (mod,) = old_case.glob("test_cex_*.py")
    assert "from compiler import replay\n" in mod.read_text(encoding="utf-8")


@pytest.mark.slow  # the default run keeps a fast sample of this group (README: test time)
def test_old_emitted_test_still_passes(old_case: Path):
    r = run_pytest(old_case)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 passed" in r.stdout, r.stdout


def test_old_emitted_test_still_bites(old_case: Path):
    """Corrupt the recorded original output: the replay must fail, not pass vacuously."""
    npz = old_case / "counterexample.npz"
    with np.load(npz) as z:
        data = {k: z[k] for k in z.files}
    data["expected_1"] = data["expected_1"] ^ np.int8(1)  # Y_lut, the refuted site's output
    np.savez(npz, **data)
    r = run_pytest(old_case)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "2 failed" in r.stdout, r.stdout  # both checks read the recorded output
