"""`check_model_file` checks and infers a model from the file's own bytes (no second
serialisation of it) where no external tensor was read into the model, and from the model
with its tensors where one was: the same checked model either way."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import numpy_helper

import compiler.frontend.checked as checked
from compiler.cli.common import UsageError, check_model_file

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "matmul_sigmoid.onnx"


def _recording(monkeypatch) -> list[type]:
    seen: list[type] = []
    real = onnx.checker.check_model

    def record(m, *a, **k):
        seen.append(type(m))
        return real(m, *a, **k)

    monkeypatch.setattr(onnx.checker, "check_model", record)
    return seen


def test_a_self_contained_file_is_checked_from_its_own_bytes(monkeypatch):
    seen = _recording(monkeypatch)
    got = check_model_file(str(MODEL))
    assert seen == [bytes]
    want = checked.infer(onnx.load(str(MODEL)))
    assert got.proto == want.proto


def test_a_model_with_external_tensors_is_checked_with_them(tmp_path, monkeypatch):
    """Negative: the file's bytes lack the tensors read from the side file."""
    m = onnx.load(str(MODEL))
    path = tmp_path / "ext.onnx"
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)  # fmt: skip
    seen = _recording(monkeypatch)
    got = check_model_file(str(path))
    assert seen == [onnx.ModelProto]
    want = checked.infer(onnx.load(str(MODEL))).proto
    assert list(got.proto.graph.node) == list(want.graph.node)
    arrays = {i.name: numpy_helper.to_array(i).tolist() for i in want.graph.initializer}
    assert {
        i.name: numpy_helper.to_array(i).tolist() for i in got.proto.graph.initializer
    } == arrays


def test_a_structural_error_names_the_file_as_before(tmp_path):
    m = onnx.load(str(MODEL))
    m.graph.node[0].input[0] = "nowhere"
    path = tmp_path / "bad.onnx"
    onnx.save(m, path)
    with pytest.raises(UsageError, match=f"invalid ONNX model {path}: .*nowhere"):
        check_model_file(str(path))
