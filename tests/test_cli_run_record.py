"""Signed run records (issue 15, "a warm run under 10% of the cold one"): an unchanged
`prover check` with a signed rw store and `--recheck-budget 0` is answered from its run
record without loading the model or the prover; anything the report depends on that
changes makes it check again, and a record that is not trustworthy is never served."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper as nh

from compiler.cli import run_record
from compiler.cli.prover import main

ROOT = Path(__file__).resolve().parent.parent
SERVED = "report served from signed run record"
SHOWCASE = ROOT / "examples" / "showcase.onnx"  # 1 proven, 1 refuted, 2 rejected: exit 1


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A model copy, a store and a key; the proof-key env var unset."""
    monkeypatch.delenv("NPUFUSION_PROOF_KEY", raising=False)
    model = tmp_path / "m.onnx"
    model.write_bytes((ROOT / "examples" / "matmul_sigmoid.onnx").read_bytes())
    key = tmp_path / "key"
    key.write_text("run record test key\n")
    return model, tmp_path / "store", key


def _check(capsys, model: Path, store: Path, key: Path | None, *extra: str):
    argv = ["check", str(model), "--no-progress", "--format", "json", "--proofs", str(store)]
    argv += [] if key is None else ["--proof-key-file", str(key)]
    rc = main([*argv, *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def _signed(capsys, model, store, key, *extra):
    return _check(capsys, model, store, key, "--recheck-budget", "0", *extra)


def _runs(store: Path) -> list[Path]:
    return sorted((store / "runs").glob("*.json"))


def test_an_unchanged_check_is_served_with_the_same_report_and_exit_code(env, capsys):
    model, store, key = env
    rc1, out1, err1 = _signed(capsys, model, store, key)
    assert rc1 == 0 and SERVED not in err1 and len(_runs(store)) == 1
    rc2, out2, err2 = _signed(capsys, model, store, key)
    assert (rc2, out2) == (rc1, out1) and SERVED in err2
    assert json.loads(out2)["summary"]["proven"] == 1
    # the record relies on the proof records the check wrote, which are still there
    rec = json.loads(_runs(store)[0].read_text())
    assert rec["records"] and all((store / r).is_file() for r in rec["records"])
    assert all(len(digest) == 64 for digest in rec["records"].values())
    assert (store / "runs" / ".gitignore").read_text().splitlines()[-1] == "*"


def test_a_refuted_check_is_served_with_its_counterexample_and_exit_1(tmp_path, capsys, env):
    _, store, key = env
    rc1, out1, _ = _signed(capsys, SHOWCASE, store, key)
    rc2, out2, err2 = _signed(capsys, SHOWCASE, store, key)
    assert rc1 == rc2 == 1 and out2 == out1 and SERVED in err2
    refuted = [s for s in json.loads(out2)["sites"] if s["verdict"] == "refuted"]
    assert refuted and refuted[0]["counterexample"]


def test_a_served_check_loads_neither_the_model_reader_nor_the_prover(env, capsys):
    model, store, key = env
    _signed(capsys, model, store, key)
    code = (
        "import sys\nfrom compiler.cli.prover import main\n"
        f"rc = main(['check', {str(model)!r}, '--no-progress', '--proofs', {str(store)!r}, "
        f"'--proof-key-file', {str(key)!r}, '--recheck-budget', '0', '--format', 'json'])\n"
        "heavy = ('numpy', 'onnx', 'onnxruntime', 'z3', 'compiler.api', 'prover.api')\n"
        "print('LOADED', rc, sorted(m for m in heavy if m in sys.modules))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert SERVED in p.stderr, p.stderr
    assert p.stdout.splitlines()[-1] == "LOADED 0 []"


def _edit_weight(model: Path) -> None:
    m = onnx.load(model)
    for i, t in enumerate(m.graph.initializer):
        a = nh.to_array(t)
        if a.size > 1 and a.dtype == np.int8:
            a = a.copy()
            a.flat[0] = np.int8(5 if a.flat[0] != 5 else 6)
            m.graph.initializer[i].CopyFrom(nh.from_array(a, t.name))
            onnx.save(m, model)
            return
    raise AssertionError("no int8 weight to edit")


def test_a_changed_model_is_checked_again(env, capsys):
    model, store, key = env
    _signed(capsys, model, store, key)
    _edit_weight(model)
    rc, out, err = _signed(capsys, model, store, key)
    assert SERVED not in err and len(_runs(store)) == 2
    assert json.loads(out)["summary"]["candidates"] == 1


@pytest.mark.parametrize(
    "extra",
    [
        ("--policy", "bounded:1"),
        ("--format", "text"),
        ("--reference", "ort-host"),
        ("--no-synthesize",),
        ("--timeout", "7"),
        ("--target", "npu_float"),
    ],
)
def test_a_changed_option_is_checked_again(env, capsys, extra):
    model, store, key = env
    _signed(capsys, model, store, key)
    _, _, err = _signed(capsys, model, store, key, *extra)
    assert SERVED not in err
    _, _, err = _signed(capsys, model, store, key, *extra)  # its own record from now on
    assert SERVED in err


def test_options_that_cannot_change_the_report_share_a_record(env, capsys, tmp_path):
    model, store, key = env
    _signed(capsys, model, store, key)
    out_file = tmp_path / "report.json"
    rc, out, err = _signed(capsys, model, store, key, "--jobs", "2", "-o", str(out_file))
    assert rc == 0 and SERVED in err and out == ""
    assert json.loads(out_file.read_text())["summary"]["proven"] == 1


def test_an_edited_target_file_is_checked_again(env, capsys, tmp_path):
    model, store, key = env
    target = tmp_path / "t.toml"
    target.write_text((ROOT / "npu_backend" / "targets" / "npu_float.toml").read_text())
    _signed(capsys, model, store, key, "--target", str(target))
    target.write_text(target.read_text() + "\n# edited\n")
    _, _, err = _signed(capsys, model, store, key, "--target", str(target))
    assert SERVED not in err


@pytest.mark.parametrize("part", ["tool_fingerprint", "dependency_fingerprint", "host_fingerprint"])
def test_a_changed_tool_dependency_or_host_is_checked_again(env, capsys, monkeypatch, part):
    model, store, key = env
    _signed(capsys, model, store, key)
    real = getattr(run_record, part)
    monkeypatch.setattr(run_record, part, lambda: {"changed": str(real())})
    _, _, err = _signed(capsys, model, store, key)
    assert SERVED not in err


def test_the_tool_fingerprint_covers_sources_and_shipped_targets():
    files = {
        p.relative_to(ROOT).as_posix()
        for d in run_record._package_dirs()
        for p in d.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert "npu_backend/targets/npu_float.toml" in files
    assert "prover/primitives.py" in files  # SEMANTICS_VERSION lives there
    assert "compiler/cli/run_record.py" in files


def test_the_host_fingerprint_names_the_cpu_features(monkeypatch):
    h = run_record.host_fingerprint()
    assert set(h) == {"cpu", "machine", "system", "python"} and len(h["cpu"]) == 64


@pytest.mark.parametrize(
    "extra",
    [
        ("--recheck-budget", "5"),  # the user wants stored proofs re-decided
        ("--recheck-budget", "0", "--no-result-cache"),
        ("--recheck-budget", "0", "--proofs-mode", "ro"),  # read only: writes nothing
    ],
)
def test_no_record_is_written_or_served_unless_asked_for(env, capsys, extra):
    model, store, key = env
    _check(capsys, model, store, key)  # fills the store (rw, signed)
    for _ in range(2):
        _, _, err = _check(capsys, model, store, key, *extra)
        assert SERVED not in err
    assert _runs(store) == []


def test_without_a_key_nothing_is_written_or_served(env, capsys):
    model, store, _ = env
    for _ in range(2):
        _, _, err = _check(capsys, model, store, None, "--recheck-budget", "0")
        assert SERVED not in err
    assert _runs(store) == []


def test_another_key_is_not_served(env, capsys, tmp_path):
    model, store, key = env
    _signed(capsys, model, store, key)
    other = tmp_path / "other"
    other.write_text("another key\n")
    _, _, err = _signed(capsys, model, store, other)
    assert SERVED not in err


def test_an_edited_record_is_ignored_with_a_warning_and_rewritten(env, capsys):
    model, store, key = env
    _, out1, _ = _signed(capsys, model, store, key)
    (path,) = _runs(store)
    rec = json.loads(path.read_text())
    rec["output"] = rec["output"].replace('"proven":1', '"proven":2')
    assert rec["output"] != out1
    path.write_text(json.dumps(rec))
    rc, out, err = _signed(capsys, model, store, key)
    assert "ignoring run record" in err and "signature is not valid" in err
    summary = json.loads(out1)["summary"]
    assert SERVED not in err and json.loads(out)["summary"] == summary and rc == 0
    _, out2, err = _signed(capsys, model, store, key)  # the check rewrote a valid record
    assert SERVED in err and out2 == out


def test_a_record_whose_proof_records_are_gone_is_not_served(env, capsys):
    model, store, key = env
    _signed(capsys, model, store, key)
    rec = json.loads(_runs(store)[0].read_text())
    first = next(iter(rec["records"]))
    (store / first).unlink()
    _, _, err = _signed(capsys, model, store, key)
    assert "gone from the store" in err and SERVED not in err
    assert (store / first).is_file()  # the check wrote it again


def test_a_record_whose_proof_records_changed_is_not_served(env, capsys):
    model, store, key = env
    _signed(capsys, model, store, key)
    rec = json.loads(_runs(store)[0].read_text())
    first = store / next(iter(rec["records"]))
    data = json.loads(first.read_text())
    data["time_ms"] = float(data.get("time_ms", 0)) + 1  # any change to the bytes
    first.write_text(json.dumps(data))
    _, _, err = _signed(capsys, model, store, key)
    assert "has changed in the store" in err and SERVED not in err


def test_an_incomplete_check_leaves_no_record(env, tmp_path):
    import argparse

    from compiler.cli.inputs_read import InputsRead

    _, store, key = env
    args = argparse.Namespace(
        model=str(env[0]), proofs=str(store), proofs_mode=None, recheck_budget=0,
        emit_tests=None, result_cache=True, proof_key_file=str(key), target=None,
    )  # fmt: skip
    read = InputsRead(model="0" * 64, target="default")
    before = run_record.started(args)

    def save(code, done, inputs=read, ctx=before):
        return run_record.save("prover", args, inputs, "{}", code, [], [], done, ctx)

    assert save(0, True) is not None
    for code, done in ((3, True), (5, True), (2, True), (0, False), (1, False)):
        assert save(code, done) is None
    assert save(0, True, inputs=InputsRead()) is None  # nothing was read
    assert save(0, True, ctx=None) is None  # no context taken before the check
    assert save(0, True, ctx={**before, "tool": "changed meanwhile"}) is None


def test_only_the_newest_records_are_kept(env, capsys, monkeypatch):
    model, store, key = env
    monkeypatch.setattr(run_record, "MAX_RECORDS", 2)
    for policy in ("bitwise", "bounded:1", "bounded:2"):
        _signed(capsys, model, store, key, "--policy", policy)
    assert len(_runs(store)) == 2
    _, _, err = _signed(capsys, model, store, key, "--policy", "bounded:2")
    assert SERVED in err


def _external_copy(tmp_path: Path) -> Path:
    """matmul_sigmoid with every tensor in a side file `weights.bin`, in its own directory."""
    d = tmp_path / "models"
    d.mkdir()
    m = onnx.load(ROOT / "examples" / "matmul_sigmoid.onnx")
    onnx.save_model(m, d / "ext.onnx", save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)  # fmt: skip
    return d / "ext.onnx"


def test_external_data_is_read_from_the_models_directory(tmp_path, capsys, monkeypatch):
    model = _external_copy(tmp_path)
    monkeypatch.chdir(tmp_path)  # not the model's directory
    rc = main(["check", str(model), "--no-progress", "--format", "json"])
    out, _ = capsys.readouterr()
    assert rc == 0 and json.loads(out)["summary"]["proven"] == 1
    (model.parent / "weights.bin").unlink()
    rc = main(["check", str(model), "--no-progress"])
    _, err = capsys.readouterr()
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "weights.bin" in err


def test_changed_external_data_is_checked_again(env, capsys, tmp_path):
    _, store, key = env
    model = _external_copy(tmp_path)
    _signed(capsys, model, store, key)
    rec = json.loads(_runs(store)[0].read_text())
    assert list(rec["external"]) == ["weights.bin"]
    _, _, err = _signed(capsys, model, store, key)
    assert SERVED in err
    data = model.parent / "weights.bin"
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 1
    data.write_bytes(bytes(raw))
    _, _, err = _signed(capsys, model, store, key)
    assert "external-data files changed" in err and SERVED not in err


def test_the_same_model_under_another_path_is_checked_again(env, capsys, tmp_path):
    model, store, key = env
    _signed(capsys, model, store, key)
    copy = tmp_path / "copy.onnx"
    copy.write_bytes(model.read_bytes())
    _, out, err = _signed(capsys, copy, store, key)
    assert SERVED not in err and json.loads(out)["model"] == str(copy)
