"""A proof store shared by many writers (issue 27 deliverable 2; issue 28 items 5 and 6).

Processes deciding overlapping and distinct obligations, saving and pruning run records
and reading all of it at once lose no record and tear none; a writer killed mid-write
leaves the store readable and complete for every write that finished, and its temporary
file is ignored by readers and removed once stale. Records get the umask's mode."""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest

from compiler.cli import run_record
from compiler.cli.inputs_read import InputsRead
from prover import store_files
from prover.api import check
from prover.errors import StoreMiss
from prover.obligation import Obligation
from prover.proofstore import ProofStore
from prover.samples import lut_of, requant, sigmoid_table
from prover.terms import Var
from prover.trust import verify

ROOT = Path(__file__).resolve().parent.parent
KEY = b"concurrent store test key"
ACC = Var("acc")
TABLE = sigmoid_table()
FORK = mp.get_context("fork")  # the children inherit the imported prover: they start at once


def _ob(k: int) -> Obligation:
    """A small epilogue obligation, distinct per k: proven for even k, refuted for odd."""
    b = lut_of(requant("requant_double", ACC, multiplier=1 << 30, shift=-9, zp=2), TABLE)
    a = lut_of(requant("requant_double", ACC, multiplier=1 << 30, shift=-9, zp=2 + k % 2), TABLE)
    return Obligation("epilogue", b, a, {"acc": (-40000 - k, 40000)}, "bitwise")


SHARED = range(6)  # every writer decides these
OWN = 2  # and this many of its own


def _own(worker: int) -> list[int]:
    return [100 + OWN * worker + i for i in range(OWN)]


def _run_args(store: Path, key_file: Path) -> argparse.Namespace:
    return argparse.Namespace(
        model="m.onnx", proofs=str(store), proofs_mode=None, recheck_budget=0, emit_tests=None,
        result_cache=True, proof_key_file=str(key_file), target=None,
    )  # fmt: skip


def _child(fn, *args) -> None:
    try:
        fn(*args)
    except BaseException:
        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def _writer(worker: int, store: Path, key_file: Path, max_runs: int) -> None:
    """Decide the shared and own obligations into `store`; save and prune run records."""
    ps = ProofStore(store, "rw", key=KEY, recheck_budget_s=0)
    run_record.MAX_RECORDS = max_runs
    args = _run_args(store, key_file)
    before = run_record.started(args)
    order = [*SHARED, *_own(worker)]
    order = order[worker % len(order) :] + order[: worker % len(order)]
    for n, k in enumerate(order):
        v = check(_ob(k), store=ps)
        assert v.status in ("proven", "refuted"), v
        read = InputsRead(model=f"{worker:04d}{n:060d}", target="default")
        rec = ps.path(_ob(k).hash)
        out = run_record.save("t", args, read, "{}", 0, [], [(rec, rec.read_bytes())], True, before)
        assert out is not None


def _reader(store: Path, stop) -> None:
    """Read every record over and over while the writers write: never a torn one."""
    ps = ProofStore(store, "ro", key=KEY)
    obs = [_ob(k) for k in SHARED]
    while not stop.is_set():
        for ob in obs:
            try:
                rec = ps.lookup(ob)
            except StoreMiss:  # not written yet
                continue
            assert rec is not None and rec.signature == "valid"
        for _, p in store_files.mtimes(store / "runs", ".json"):
            try:
                body = json.loads(p.read_text())
            except FileNotFoundError:
                continue  # pruned meanwhile
            sig = body.pop("signature")
            assert verify(KEY, sig, body)


def _start(fn, *args):
    p = FORK.Process(target=_child, args=(fn, *args))
    p.start()
    return p


def test_eight_writers_and_a_reader_lose_no_record_and_tear_none(tmp_path):
    store, key_file = tmp_path / "store", tmp_path / "key"
    key_file.write_bytes(KEY)
    for k in [*SHARED, *_own(0)]:
        check(_ob(k))  # warm up in the parent (the children inherit it)
    writers = [_start(_writer, w, store, key_file, 8) for w in range(8)]
    stop = FORK.Event()
    reader = _start(_reader, store, stop)
    t0 = time.monotonic()
    for p in writers:
        p.join(30)
    elapsed = time.monotonic() - t0
    stop.set()
    reader.join(30)
    assert [p.exitcode for p in writers] == [0] * 8 and reader.exitcode == 0
    assert elapsed < 20
    # every record is there, whole, and verifies: re-decided from the ro store
    ro = ProofStore(store, "ro", key=KEY, recheck_budget_s=5)
    ks = [*SHARED, *(k for w in range(8) for k in _own(w))]
    for k in ks:
        v = check(_ob(k), store=ro)
        assert v.cached and v.status == ("proven" if k % 2 == 0 else "refuted")
    records = sorted(store.glob("??/*.json"))
    assert len(records) == len(ks)
    runs = store_files.mtimes(store / "runs", ".json")
    assert len(runs) == 8  # 64 saved, pruned to the newest 8 by eight pruners at once
    for _, p in runs:
        body = json.loads(p.read_text())
        assert verify(KEY, body.pop("signature"), body)
    leftovers = [p for p in store.rglob("*") if store_files.is_temp(p.name)]
    assert leftovers == []


def _paused_writer(store: Path, ks: list[int], kill_at: int, marker: Path) -> None:
    """Write the records of `ks` in order; before renaming the `kill_at`-th into place,
    say so (its temporary file's path in `marker`) and wait to be killed."""
    real = os.replace
    n = [0]

    def replace(src, dst):
        if str(dst).endswith(".json") and not str(dst).endswith(".gitignore"):
            if n[0] == kill_at:
                with open(src, "r+b") as f:  # as if killed halfway through the write
                    f.truncate(os.path.getsize(src) // 2)
                Path(f"{marker}.part").write_text(str(src))
                real(f"{marker}.part", marker)  # whole when the test sees it
                time.sleep(60)
            n[0] += 1
        real(src, dst)

    os.replace = replace
    ps = ProofStore(store, "rw", key=KEY)
    for k in ks:
        check(_ob(k), store=ps)


def test_a_writer_killed_mid_write_leaves_every_finished_record(tmp_path):
    store, marker = tmp_path / "store", tmp_path / "marker"
    ks = [0, 1, 2, 3]
    for k in ks:
        check(_ob(k))
    p = _start(_paused_writer, store, ks, 2, marker)
    deadline = time.monotonic() + 20
    while not marker.exists() and time.monotonic() < deadline and p.is_alive():
        time.sleep(0.01)
    assert marker.exists(), "the writer never reached its third rename"
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    assert p.exitcode == -signal.SIGKILL
    tmp = Path(marker.read_text())
    assert tmp.is_file() and store_files.is_temp(tmp.name)  # the torn write, not in place
    ro = ProofStore(store, "ro", key=KEY, recheck_budget_s=5)
    for k in ks[:2]:  # finished: there, whole, and they verify
        assert check(_ob(k), store=ro).cached
    rw = ProofStore(store, "rw", key=KEY)
    assert rw.lookup(_ob(2)) is None  # never renamed into place: a miss, not a corrupt record
    # a young temporary file may be a live writer's: left alone; a stale one is removed
    assert store_files.remove_stale_temps(tmp.parent) == 0 and tmp.exists()
    old = time.time() - store_files.STALE_TEMP_S - 1
    os.utime(tmp, (old, old))
    v = check(_ob(2), store=rw)  # the next writer in that directory cleans it up
    assert not tmp.exists() and v.status == "proven"
    assert check(_ob(2), store=ro).cached and check(_ob(3), store=rw).status == "refuted"


def test_writers_killed_at_random_leave_only_whole_records(tmp_path):
    store, key_file = tmp_path / "store", tmp_path / "key"
    key_file.write_bytes(KEY)
    for k in [*SHARED, *_own(0)]:
        check(_ob(k))
    codes = []
    for delay in (0.005, 0.02, 0.05):
        procs = [_start(_writer, w, store, key_file, 4) for w in range(3)]
        time.sleep(delay)
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
            p.join(10)
            codes.append(p.exitcode)
    assert -signal.SIGKILL in codes and set(codes) <= {0, -signal.SIGKILL}
    ps = ProofStore(store, "rw", key=KEY)
    for rec in store.glob("??/*.json"):  # each whole: it loads and verifies
        ob = next(_ob(k) for k in [*SHARED, *range(100, 100 + 3 * OWN)] if _ob(k).hash == rec.stem)
        assert ps.lookup(ob) is not None and ps.lookup(ob).signature == "valid"
    for _, p in store_files.mtimes(store / "runs", ".json"):
        body = json.loads(p.read_text())
        assert verify(KEY, body.pop("signature"), body)
    ignore = store / "runs" / ".gitignore"
    assert not ignore.exists() or ignore.read_text().endswith("\n*\n")


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_records_get_the_mode_the_umask_gives(tmp_path, umask):
    store, key_file = tmp_path / "store", tmp_path / "key"
    key_file.write_bytes(KEY)
    old = os.umask(umask)
    try:
        rec = ProofStore(store, "rw", key=KEY).put(_ob(0), check(_ob(0)))
        args = _run_args(store, key_file)
        before = run_record.started(args)
        run = run_record.save(
            "t", args, InputsRead("0" * 64, "default"), "{}", 0, [], [], True, before
        )
    finally:
        os.umask(old)
    assert rec is not None and run is not None
    for p in (rec, run, run.parent / ".gitignore"):
        assert p.stat().st_mode & 0o777 == 0o666 & ~umask, p


def test_a_run_record_removed_during_pruning_is_already_gone(tmp_path, monkeypatch):
    """Issue 28 item 6: another process unlinks a record between the listing and its stat."""
    runs = tmp_path / "runs"
    runs.mkdir()
    for i in range(5):
        (runs / f"{i:032d}.json").write_text("{}")
    real = os.scandir
    vanished: list[str] = []

    class Vanishing:
        def __init__(self, path):
            self.entries = list(real(path))
            if not vanished:  # the first listing: one record is gone before it is stat'ed
                vanished.append(self.entries[0].path)
                os.unlink(vanished[0])

        def __iter__(self):
            return iter(self.entries)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(run_record, "MAX_RECORDS", 2)
    monkeypatch.setattr(os, "scandir", Vanishing)
    run_record._prune(runs)
    monkeypatch.setattr(os, "scandir", real)
    assert len(list(runs.glob("*.json"))) == 2


def test_a_run_record_that_cannot_be_written_does_not_fail_a_complete_check(tmp_path, capsys):
    from compiler.cli.prover import main

    store, key_file = tmp_path / "store", tmp_path / "key"
    key_file.write_bytes(KEY)
    store.mkdir()
    (store / "runs").write_text("not a directory")  # the run record cannot be written
    model = ROOT / "examples" / "matmul_sigmoid.onnx"
    argv = ["check", str(model), "--no-progress", "--proofs", str(store), "--proof-key-file",
            str(key_file), "--recheck-budget", "0"]  # fmt: skip
    rc = main(argv)
    _, err = capsys.readouterr()
    assert rc == 0 and "run record not written" in err


@pytest.mark.slow  # three cold `prover check` processes at once: ~4 s of CPU
def test_concurrent_prover_checks_on_one_store_agree(tmp_path, capsys, monkeypatch):
    from compiler.cli.prover import main

    store, key_file = tmp_path / "store", tmp_path / "key"
    key_file.write_bytes(KEY)
    monkeypatch.delenv("NPUFUSION_PROOF_KEY", raising=False)
    model = str(ROOT / "examples" / "showcase.onnx")  # proven, refuted and rejected sites
    opts = ["--no-progress", "--proofs", str(store), "--proof-key-file", str(key_file)]
    cmd = [sys.executable, "-m", "compiler.cli.prover", "check", model, "--format", "json",
           "--recheck-budget", "0", *opts]  # fmt: skip
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    results = [(*p.communicate(timeout=300), p.returncode) for p in procs]
    assert [rc for _, _, rc in results] == [1, 1, 1], [e.decode() for _, e, _ in results]
    verdicts = [[s["verdict"] for s in json.loads(out)["sites"]] for out, _, _ in results]
    assert verdicts[0] == verdicts[1] == verdicts[2] and "proven" in verdicts[0]
    assert all(b"Traceback" not in e for _, e, _ in results)
    # the store they wrote together passes the ro gate (re-deciding every stored proof)
    rc = main(["check", model, "--format", "json", "--proofs-mode", "ro", *opts])
    out, err = capsys.readouterr()
    assert rc == 1 and "proof gate failed" not in err
    assert [s["verdict"] for s in json.loads(out)["sites"]] == verdicts[0]
