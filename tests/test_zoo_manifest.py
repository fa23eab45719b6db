"""The zoo manifest: TOML and YAML, globs relative to the manifest, axes per model or by
default, a directory of models; every mistake one line and exit 2 before anything runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli_helpers import EXAMPLES, assert_one_line_error, prover

from compiler.zoo.manifest import Defaults, ManifestError, load

TARGET = Path(__file__).resolve().parent.parent / "npu_backend" / "targets" / "npu_fixed.toml"


def _models(d: Path, *names: str) -> None:
    (d / "m").mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copy(EXAMPLES / f"{n}.onnx", d / "m" / f"{n}.onnx")


def test_toml_manifest_globs_and_axes(tmp_path):
    _models(tmp_path, "matmul_sigmoid", "multi_user", "showcase")
    shutil.copy(TARGET, tmp_path / "fixed.toml")
    (tmp_path / "zoo.toml").write_text(
        """
[defaults]
policies = ["bitwise"]

[[models]]
path = "m/m*.onnx"
targets = ["npu_float", "fixed.toml"]

[[models]]
paths = ["m/showcase.onnx", "m/matmul_sigmoid.onnx"]
policies = ["bitwise", "bounded:1"]
references = "onnx-qdq-float"
"""
    )
    specs = load(str(tmp_path / "zoo.toml"), Defaults())
    keys = [s.key for s in specs]
    assert keys[:4] == [
        ("m/matmul_sigmoid.onnx", "npu_float", "bitwise", "onnx"),
        ("m/matmul_sigmoid.onnx", "npu_fixed", "bitwise", "onnx"),
        ("m/multi_user.onnx", "npu_float", "bitwise", "onnx"),
        ("m/multi_user.onnx", "npu_fixed", "bitwise", "onnx"),
    ]
    assert keys[4:] == [
        ("m/showcase.onnx", "npu_float", "bitwise", "onnx-qdq-float"),
        ("m/showcase.onnx", "npu_float", "bounded:1", "onnx-qdq-float"),
        ("m/matmul_sigmoid.onnx", "npu_float", "bitwise", "onnx-qdq-float"),
        ("m/matmul_sigmoid.onnx", "npu_float", "bounded:1", "onnx-qdq-float"),
    ]
    assert specs[1].target == str(tmp_path / "fixed.toml")  # relative to the manifest
    assert Path(specs[0].model).is_file()


def test_yaml_manifest_and_a_directory(tmp_path):
    pytest.importorskip("yaml")
    _models(tmp_path, "matmul_sigmoid", "multi_user")
    (tmp_path / "zoo.yaml").write_text(
        "models:\n  - path: m/*.onnx\n    targets: [npu_fixed]\n    policies: bounded:2\n"
    )
    specs = load(str(tmp_path / "zoo.yaml"), Defaults())
    assert [s.key for s in specs] == [
        ("m/matmul_sigmoid.onnx", "npu_fixed", "bounded:2", "onnx"),
        ("m/multi_user.onnx", "npu_fixed", "bounded:2", "onnx"),
    ]
    d = load(str(tmp_path), Defaults(policies=("bounded:1",)))
    assert [s.key for s in d] == [
        ("m/matmul_sigmoid.onnx", "npu_float", "bounded:1", "onnx"),
        ("m/multi_user.onnx", "npu_float", "bounded:1", "onnx"),
    ]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("models = [", "not valid TOML"),
        ("title = 'x'\n[[models]]\npath = 'm/*.onnx'", "unknown key 'title'"),
        ("models = []", "'models' must be a non-empty list"),
        ("[[models]]\npath = 'm/nothing*.onnx'", "matches no file"),
        ("[[models]]\npath = 'm/*.onnx'\npaths = ['m/*.onnx']", "exactly one of 'path' or 'paths'"),
        ("[[models]]\npath = 'm/*.onnx'\npolicy = 'bitwise'", "unknown key 'policy'"),
        ("[[models]]\npath = 'm/*.onnx'\npolicies = ['exact']", "policy 'exact'"),
        ("[[models]]\npath = 'm/*.onnx'\ntargets = ['npu_nowhere']", "target file not found"),
        ("[[models]]\npath = 'm/*.onnx'\nreferences = ['ort-mips']", "--reference"),
        ("[[models]]\npath = 'm/*.onnx'\ntargets = [1]", "targets must be a string"),
    ],
)
def test_bad_manifests(tmp_path, text, needle):
    _models(tmp_path, "matmul_sigmoid")
    (tmp_path / "zoo.toml").write_text(text)
    with pytest.raises(ManifestError, match=needle.replace("[", r"\[").replace("(", r"\(")):
        load(str(tmp_path / "zoo.toml"), Defaults())


def test_empty_directory_and_missing_manifest(tmp_path):
    with pytest.raises(ManifestError, match="has no \\*.onnx file"):
        load(str(tmp_path), Defaults())
    with pytest.raises(ManifestError, match="not found"):
        load(str(tmp_path / "zoo.toml"), Defaults())


def test_cli_bad_manifest_is_one_line_exit_2(tmp_path):
    _models(tmp_path, "matmul_sigmoid")
    (tmp_path / "zoo.toml").write_text("[[models]]\npath = 'm/none*.onnx'\n")
    r = prover("zoo", tmp_path / "zoo.toml", "--no-processes", "--workers", "1")
    assert_one_line_error(r, "zoo.toml: models[0]: 'm/none*.onnx' matches no file")


def test_a_directory_takes_file_names_literally(tmp_path):
    """A model named like a glob ("odd[1].onnx") is that file, not a pattern."""
    shutil.copy(EXAMPLES / "matmul_sigmoid.onnx", tmp_path / "odd[1].onnx")
    (spec,) = load(str(tmp_path), Defaults())
    assert spec.label == "odd[1].onnx" and Path(spec.model).is_file()
