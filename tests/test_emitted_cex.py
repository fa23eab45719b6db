"""`prover check --emit-tests`: replayable counterexample tests, deterministic, and they bite.

The showcase model's `mm_lut -> sig_lut` site is refuted bitwise on the default
target (one Sigmoid table entry differs from ONNX Runtime's at a rounding boundary).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import EXAMPLES, REPO, prover

SHOWCASE = EXAMPLES / "showcase.onnx"


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    """(replay dir, JSON report) of one `prover check --emit-tests` run."""
    root = tmp_path_factory.mktemp("emit")
    out = root / "tests"
    report = root / "report.json"
    r = prover(
        "check", SHOWCASE, "--proofs-mode", "off", "--emit-tests", out, "--format", "json",
        "-o", report,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    dirs = sorted(out.iterdir())
    assert len(dirs) == 1, dirs
    return dirs[0], json.loads(report.read_text())


def load_module(path: Path):
    """Import a generated test module from its file."""
    spec = importlib.util.spec_from_file_location(f"gen_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_files_named_from_the_obligation_hash(emitted):
    d, report = emitted
    (site,) = [s for s in report["sites"] if s["verdict"] == "refuted"]
    key = site["obligation"][:16]
    assert d.name == f"cex_{key}"
    names = sorted(p.name for p in d.iterdir() if p.is_file())
    assert names == ["counterexample.npz", "meta.json", "model.onnx", f"test_cex_{key}.py"]
    assert (d / "model.onnx").read_bytes() == SHOWCASE.read_bytes()
    assert Path(site["counterexample"]["npz"]) == d / "counterexample.npz"
    meta = json.loads((d / "meta.json").read_text())
    assert meta["nodes"] == ["mm_lut", "sig_lut"] and meta["policy"] == "bitwise"


def test_data_file_holds_inputs_and_both_outputs(emitted):
    d, report = emitted
    meta = json.loads((d / "meta.json").read_text())
    with np.load(d / "counterexample.npz") as z:
        x = z[f"input_{meta['inputs'].index('X')}"]
        i = meta["outputs"].index("Y_lut")
        expected, actual = z[f"expected_{i}"], z[f"actual_{i}"]
    assert x.dtype == np.int8 and x.shape == (1, 16)
    assert expected.dtype == np.int8 and int(np.abs(expected.astype(int) - actual).max()) == 1
    (site,) = [s for s in report["sites"] if s["verdict"] == "refuted"]
    assert site["counterexample"]["inputs"]["X"]["data"] == x.tolist()


def test_rerun_does_not_duplicate(emitted):
    d, _ = emitted
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in d.iterdir()}
    r = prover("check", SHOWCASE, "--proofs-mode", "off", "--emit-tests", d.parent)
    assert r.returncode == 1
    assert [p.name for p in d.parent.iterdir()] == [d.name]
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in d.iterdir()}
    assert after == before  # identical content, not even rewritten


def test_generated_module_passes_under_pytest(emitted):
    d, _ = emitted
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(d)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 passed" in r.stdout


def test_generated_test_fails_when_the_refuted_rewrite_is_re_enabled(emitted, monkeypatch):
    """Force the gate to accept the refuted site: the replay test must now fail."""
    from compiler.passes import gate

    d, _ = emitted
    mod = load_module(next(d.glob("test_cex_*.py")))
    mod.test_refuted_rewrite_not_applied_or_fixed()  # control: passes as compiled today

    original = gate.decide_site

    def accept_everything(g, site, ctx):
        original(g, site, ctx)
        if site.verdict == "refuted":
            site.decide("proven")
            site.counterexample = None

    monkeypatch.setattr(gate, "decide_site", accept_everything)
    with pytest.raises(AssertionError, match="differs from ONNX Runtime by 1"):
        mod.test_refuted_rewrite_not_applied_or_fixed()


def test_original_graph_check_detects_a_changed_reference(emitted, tmp_path):
    """If ONNX Runtime's answer for the original graph changed, the replay says so."""
    import shutil

    d, _ = emitted
    copy = tmp_path / d.name
    shutil.copytree(d, copy)
    meta = json.loads((copy / "meta.json").read_text())
    with np.load(copy / "counterexample.npz") as z:
        arrays = {k: z[k].copy() for k in z.files}
    i = meta["outputs"].index("Y_lut")
    arrays[f"expected_{i}"] = arrays[f"actual_{i}"]  # pretend the reference was the fused output
    np.savez(copy / "counterexample.npz", **arrays)
    mod = load_module(next(copy.glob("test_cex_*.py")))
    with pytest.raises(AssertionError, match="Y_lut"):
        mod.test_original_graph_gives_recorded_output()
