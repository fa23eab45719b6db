"""`prover check --emit-tests` copies the target file the run loaded (only when one is named)."""

from __future__ import annotations

import json

from cli_helpers import EXAMPLES, REPO, prover

SHOWCASE = EXAMPLES / "showcase.onnx"
TARGET = REPO / "npu_backend" / "targets" / "npu_float.toml"


def _emitted(out, *extra):
    r = prover("check", SHOWCASE, "--proofs-mode", "off", "--emit-tests", out, *extra)
    assert r.returncode == 1, r.stderr
    (d,) = sorted(out.iterdir())
    return d, json.loads((d / "meta.json").read_text())


def test_named_target_file_is_copied_beside_the_test(tmp_path):
    d, meta = _emitted(tmp_path / "named", "--target", TARGET)
    assert meta["target_file"] == "target.toml"
    assert (d / "target.toml").read_bytes() == TARGET.read_bytes()


def test_shipped_target_name_copies_its_file(tmp_path):
    d, meta = _emitted(tmp_path / "by_name", "--target", "npu_float")
    assert meta["target_file"] == "target.toml"
    assert (d / "target.toml").read_bytes() == TARGET.read_bytes()


def test_no_target_named_no_copy(tmp_path):
    d, meta = _emitted(tmp_path / "default")
    assert meta["target_file"] is None
    assert not (d / "target.toml").exists()
