"""Issue 28 item 3: a run record is keyed by the bytes the check read, as it read them.

A model, target or external-data file changed after the check read it (or a FIFO that
gives other bytes on each open) must never leave the old report under the new bytes:
the next check of the new bytes runs, and is not served "proven" from a stale record."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path

import onnx
import pytest

from compiler.cli import check_run, run_record
from compiler.cli.prover import main

ROOT = Path(__file__).resolve().parent.parent
PROVEN = (ROOT / "examples" / "matmul_sigmoid.onnx").read_bytes()  # exit 0
REFUTED = (ROOT / "examples" / "showcase.onnx").read_bytes()  # a refuted site: exit 1
SERVED = "report served from signed run record"


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.delenv("NPUFUSION_PROOF_KEY", raising=False)
    key = tmp_path / "key"
    key.write_text("inputs-read test key\n")
    return tmp_path, tmp_path / "store", key


def _check(capsys, model: Path, store: Path, key: Path, *extra: str):
    argv = ["check", str(model), "--no-progress", "--format", "json", "--proofs", str(store)]
    rc = main([*argv, "--proof-key-file", str(key), "--recheck-budget", "0", *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def _after_the_check(monkeypatch, change) -> None:
    """Run `change()` once, right after the pipeline read its inputs and checked."""
    real = check_run.run_pipeline
    done = []

    def pipeline(*a, **k):
        run = real(*a, **k)
        if not done:
            done.append(change())
        return run

    monkeypatch.setattr(check_run, "run_pipeline", pipeline)


def _runs(store: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((store / "runs").glob("*.json"))]


def test_a_model_changed_after_the_check_is_not_served_the_old_report(env, capsys, monkeypatch):
    tmp, store, key = env
    model = tmp / "m.onnx"
    model.write_bytes(PROVEN)
    _after_the_check(monkeypatch, lambda: model.write_bytes(REFUTED))
    rc, out, _ = _check(capsys, model, store, key)
    assert rc == 0 and json.loads(out)["summary"]["proven"] == 1
    (rec,) = _runs(store)
    assert rec["fingerprint"]["model"] == hashlib.sha256(PROVEN).hexdigest()  # as read
    rc, out, err = _check(capsys, model, store, key)  # the file now holds the refuted model
    assert SERVED not in err and rc == 1 and json.loads(out)["summary"]["refuted"] >= 1
    model.write_bytes(PROVEN)  # the bytes the first record was made from: served
    rc, _, err = _check(capsys, model, store, key)
    assert SERVED in err and rc == 0


def test_a_target_changed_after_the_check_is_not_served_the_old_report(env, capsys, monkeypatch):
    tmp, store, key = env
    model = tmp / "m.onnx"
    model.write_bytes(PROVEN)
    target = tmp / "t.toml"
    original = (ROOT / "npu_backend" / "targets" / "npu_float.toml").read_text()
    target.write_text(original)
    _after_the_check(monkeypatch, lambda: target.write_text(original + "\n# edited\n"))
    _check(capsys, model, store, key, "--target", str(target))
    (rec,) = _runs(store)
    digest = hashlib.sha256(original.encode()).hexdigest()
    assert rec["fingerprint"]["target"] == f"file:{digest}"
    _, _, err = _check(capsys, model, store, key, "--target", str(target))
    assert SERVED not in err
    target.write_text(original)
    _, _, err = _check(capsys, model, store, key, "--target", str(target))
    assert SERVED in err


def test_external_data_changed_after_the_check_is_not_served(env, capsys, monkeypatch):
    tmp, store, key = env
    d = tmp / "models"
    d.mkdir()
    m = onnx.load_model_from_string(PROVEN)
    onnx.save_model(m, d / "ext.onnx", save_as_external_data=True,
                    all_tensors_to_one_file=True, location="w.bin", size_threshold=0)  # fmt: skip
    data = d / "w.bin"
    original = data.read_bytes()
    edited = bytearray(original)
    edited[-1] ^= 1
    _after_the_check(monkeypatch, lambda: data.write_bytes(bytes(edited)))
    rc, _, _ = _check(capsys, d / "ext.onnx", store, key)
    assert rc == 0
    (rec,) = _runs(store)
    assert list(rec["external"]) == ["w.bin"] and rec["external"]["w.bin"]["ranges"]
    _, _, err = _check(capsys, d / "ext.onnx", store, key)
    assert SERVED not in err and "external-data files changed" in err
    _, _, err = _check(capsys, d / "ext.onnx", store, key)  # recorded as read the last time
    assert SERVED in err


def test_a_record_is_not_written_when_the_tool_changed_during_the_check(env, capsys, monkeypatch):
    tmp, store, key = env
    model = tmp / "m.onnx"
    model.write_bytes(PROVEN)
    real = run_record.tool_fingerprint
    _after_the_check(
        monkeypatch, lambda: monkeypatch.setattr(run_record, "tool_fingerprint", lambda: "x")
    )
    rc, _, _ = _check(capsys, model, store, key)
    assert rc == 0 and _runs(store) == []
    monkeypatch.setattr(run_record, "tool_fingerprint", real)


class _Feeder:
    """Feeds a FIFO: each open by a reader gets the next of `contents`."""

    def __init__(self, fifo: Path, contents: list[bytes]) -> None:
        self.fifo, self.contents, self.stop = fifo, list(contents), False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for data in self.contents:
            with open(self.fifo, "wb") as f:  # blocks until a reader opens the FIFO
                if self.stop:
                    return
                f.write(data)
            time.sleep(0.3)  # the reader reads to EOF and closes before the next open

    def close(self) -> None:
        self.stop = True
        while self.thread.is_alive():  # release a writer blocked in open()
            fd = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)
            self.thread.join(0.05)
            os.close(fd)


def test_a_fifo_model_is_read_once_and_recorded_as_read(env, capsys):
    tmp, store, key = env
    fifo = tmp / "m.onnx"
    os.mkfifo(fifo)
    feeder = _Feeder(fifo, [PROVEN, REFUTED, PROVEN])
    try:
        rc, out, err = _check(capsys, fifo, store, key)  # reads the first bytes only
        assert rc == 0 and json.loads(out)["summary"]["proven"] == 1, err
        (rec,) = _runs(store)
        assert rec["fingerprint"]["model"] == hashlib.sha256(PROVEN).hexdigest()
        rc, out, err = _check(capsys, fifo, store, key)  # the FIFO now gives the refuted one
        assert SERVED not in err and rc == 1
    finally:
        feeder.close()


def test_no_record_relies_on_a_proof_record_rewritten_with_another_verdict(
    env, capsys, monkeypatch
):
    """Another process rewrites a proof record between the check and the save: the run
    record would answer "proven" for a store that now says otherwise."""
    tmp, store, key = env
    model = tmp / "m.onnx"
    model.write_bytes(PROVEN)

    def rewrite() -> None:
        (rec,) = store.glob("??/*.json")
        body = json.loads(rec.read_text())
        body["verdict"]["status"] = "refuted"  # what a tampering (or buggy) writer left
        rec.write_text(json.dumps(body))

    _after_the_check(monkeypatch, rewrite)
    rc, _, _ = _check(capsys, model, store, key)
    assert rc == 0 and _runs(store) == []


def test_a_malformed_external_data_offset_is_bad_input(env, capsys):
    tmp, store, key = env
    m = onnx.load_model_from_string(PROVEN)
    onnx.save_model(m, tmp / "ext.onnx", save_as_external_data=True,
                    all_tensors_to_one_file=True, location="w.bin", size_threshold=0)  # fmt: skip
    m = onnx.load(tmp / "ext.onnx", load_external_data=False)
    t = next(t for t in m.graph.initializer if t.external_data)
    t.external_data.add(key="offset", value="not a number")
    onnx.save(m, tmp / "ext.onnx")
    rc, _, err = _check(capsys, tmp / "ext.onnx", store, key)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "external data" in err
