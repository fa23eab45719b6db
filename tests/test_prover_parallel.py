"""`--jobs`: deciding obligations in worker processes changes nothing but the wall time."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import onnx
import pytest
from models import matmul_activation

import prover.parallel as par
from compiler.api import compile_model
from prover.errors import VacuousObligation
from prover.obligation import Obligation
from prover.parallel import check_many
from prover.samples import index_map_flatten
from prover.terms import Var, op

REPO = Path(__file__).resolve().parents[1]


def _obligations() -> list[Obligation]:
    acc = Var("acc")
    fl = op("requant_float", acc, scale=0.0123, zp=3, out="int8")
    fx = op("requant_double", acc, multiplier=1690499072, shift=-6, zp=3, out="int8")
    return [
        Obligation("epilogue", fl, fx, {"acc": (-40000, 40000)}, "bitwise"),
        Obligation("epilogue", fl, fx, {"acc": (-40000, 40000)}, "bounded:1"),
        Obligation("epilogue", fl, fl, {"acc": (-40000, 40000)}, "bitwise"),
        index_map_flatten(3, 5, transposed=True),
        Obligation("epilogue", fl, fx, {"acc": (5, 4)}, "bitwise"),  # vacuous: an error
    ]


def _key(v):
    if isinstance(v, Exception):
        return type(v).__name__
    cx = v.counterexample
    return (v.status, v.max_diff, v.obligation_hash, None if cx is None else cx.assignment)


def test_two_workers_give_the_same_verdicts_as_one():
    obs = _obligations()
    one = check_many(obs, jobs=1, timeout_s=10.0)
    two = check_many(obs, jobs=2, timeout_s=10.0)
    assert [_key(v) for v in one] == [_key(v) for v in two]
    assert [_key(v)[0] for v in one[:4]] == ["refuted", "proven", "proven", "refuted"]
    assert isinstance(two[4], VacuousObligation)


@pytest.mark.slow  # the default run keeps a fast sample of this group (README: test time)
def test_cli_jobs_does_not_change_the_report(tmp_path):
    reports = []
    for jobs in ("1", "2"):
        out = tmp_path / f"r{jobs}.json"
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "compiler.cli.prover",
                "check",
                "examples/showcase.onnx",
                "--proofs-mode",
                "off",
                "--format",
                "json",
                "-o",
                str(out),
                "--jobs",
                jobs,
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert p.returncode == 1, p.stderr
        sites = json.loads(out.read_text())["sites"]
        for s in sites:
            s.pop("time_ms")
        reports.append(sites)
    assert reports[0] == reports[1]
    assert [s["verdict"] for s in reports[0]] == ["proven", "refuted", "rejected", "rejected"]


# --- workers started early (`start`), shared batches, exit --------------------------------

SLOW_START = """
import sys, time
if "prover-worker" in sys.argv:  # a worker (`prover.parallel._BOOT`): as if its imports took a minute
    time.sleep(60)
"""


def _slow_start_env(tmp_path: Path) -> dict[str, str]:
    """An environment in which every spawned worker needs 60 s to start."""
    (tmp_path / "sitecustomize.py").write_text(SLOW_START)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}


@pytest.mark.slow  # the default run keeps a fast sample of this group (README: test time)
def test_a_worker_still_starting_delays_neither_the_batch_nor_the_exit(tmp_path):
    """--jobs 2 on a 512-column model (workers started early): the worker never becomes
    ready; the process decides everything itself and exits at once (terminating it),
    with the verdicts --jobs 1 gives."""
    model = tmp_path / "pc512.onnx"
    onnx.save(matmul_activation(K=16, N=512, M=1, per_channel=True), model)
    reports = {}
    for name, jobs, env in (("one", "1", None), ("two", "2", _slow_start_env(tmp_path))):
        out = tmp_path / f"{name}.json"
        argv = [sys.executable, "-m", "compiler.cli.prover", "check", str(model)]
        argv += ["--target", "npu_backend/targets/npu_float.toml", "--proofs-mode", "off"]
        argv += ["--format", "json", "-o", str(out), "--jobs", jobs, "--no-progress"]
        # 60 s per worker start: finishing well within it means nobody waited for one
        p = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=45)
        assert p.returncode == 0, p.stderr
        sites = json.loads(out.read_text())["sites"]
        for s in sites:
            s.pop("time_ms")
        reports[name] = sites
    assert reports["one"] == reports["two"]
    assert [s["verdict"] for s in reports["one"]] == ["proven"]


def test_an_unused_early_worker_is_terminated_at_exit_not_awaited(tmp_path):
    script = (
        "import prover.parallel as par\n"
        "par.start(1)\n"
        "print(par._workers[0].process.pid, flush=True)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=_slow_start_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=45,
    )
    assert p.returncode == 0, p.stderr
    pid = int(p.stdout.split()[0])
    deadline = time.monotonic() + 30  # terminated, not waited for: it exits on its own
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"worker {pid} still running after its parent exited")


def _verdict_keys(r):
    (s,) = r.sites
    vs = [r.context.state.verdicts[h] for h in s.obligations]
    return [s.verdict, s.obligation_hash, *(_key(v) for v in vs)]


def _shared_per_channel(n: int, target: str) -> None:
    m = matmul_activation(K=16, N=n, M=1, per_channel=True)
    par.start(1)
    assert par.wait_ready(60) == 1
    before = par.COUNTS["workers"]
    two = compile_model(m, "bitwise", target, jobs=2, synthesis=False)
    shared = par.COUNTS["workers"] - before
    one = compile_model(m, "bitwise", target, jobs=1, synthesis=False)
    assert len(one.sites[0].obligations) == n  # one obligation per column
    assert 0 < shared < n  # the worker and this process both decided some
    assert _verdict_keys(one) == _verdict_keys(two)


def test_a_shared_per_channel_batch_gives_the_verdicts_of_one_process():
    _shared_per_channel(128, "npu_backend/targets/npu_fixed.toml")  # refuted columns


@pytest.mark.slow
def test_the_2048_column_model_gives_the_same_verdicts_with_a_worker():
    _shared_per_channel(2048, "npu_backend/targets/npu_float.toml")


def test_a_worker_that_dies_holding_a_chunk_is_replaced_by_this_process(monkeypatch):
    obs = _obligations()[:4] * 8  # 32 obligations, four distinct
    par.start(1)
    assert par.wait_ready(60) == 1
    real = par._Batch.service
    killed = []

    def service(self):
        real(self)
        held = [w for w in par._workers if w.chunk is not None]
        if held and not killed:
            os.kill(held[0].process.pid, signal.SIGKILL)
            held[0].process.wait()
            killed.append(held[0].chunk)

    monkeypatch.setattr(par._Batch, "service", service)
    got = check_many(obs, jobs=2, timeout_s=10.0)
    assert killed and par.running() == 0  # the dead worker was dropped
    assert [_key(v) for v in got] == [_key(v) for v in check_many(obs, jobs=1, timeout_s=10.0)]


def test_a_stopped_worker_holding_a_chunk_delays_nothing_and_its_late_answer_is_ignored(
    monkeypatch,
):
    """This process decides what a worker holds rather than wait for it; the answer the
    worker sends once resumed belongs to the old batch and is dropped in the next one."""
    obs = _obligations()[:4] * 8
    par.start(1)
    assert par.wait_ready(60) == 1
    (w,) = par._workers
    real = par._Batch.service
    stopped = []

    def service(self):
        real(self)
        if w.chunk is not None and not stopped:
            os.kill(w.process.pid, signal.SIGSTOP)
            stopped.append(w.chunk)

    monkeypatch.setattr(par._Batch, "service", service)
    try:
        got = check_many(obs, jobs=2, timeout_s=10.0)
    finally:
        os.kill(w.process.pid, signal.SIGCONT)
    monkeypatch.setattr(par._Batch, "service", real)
    alone = [_key(v) for v in check_many(obs, jobs=1, timeout_s=10.0)]
    assert stopped and [_key(v) for v in got] == alone
    assert w.conn.poll(30)  # the late answer to the first batch is waiting...
    again = check_many(obs[::-1], jobs=2, timeout_s=10.0)  # ...and must not fill this one
    assert [_key(v) for v in again] == alone[::-1] and par.running() == 1


def test_an_exception_in_a_worker_reaches_the_caller():
    """The worker loop itself (`_serve`, here in a thread over a pipe): a chunk whose
    options make `check` raise a TypeError comes back as a failure that re-raises it."""
    mine, theirs = multiprocessing.Pipe()
    t = threading.Thread(target=par._serve, args=(theirs,), daemon=True)
    t.start()
    assert mine.recv() == "ready"
    batch = par._Batch(_obligations()[:1], 2, {}, False)
    mine.send(((batch.number, 0, 1), _obligations()[:1], {"no_such_option": 1}, False))
    w = par._Worker(process=None, conn=mine, ready=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="no_such_option"):
        par._receive(w, batch)
    mine.send(None)
    t.join(10)
    assert not t.is_alive()


def test_a_worker_found_dead_when_handed_a_chunk_is_dropped(monkeypatch):
    obs = _obligations()[:4] * 4
    par.shutdown()  # a fresh worker, holding no chunk of an earlier batch
    par.start(1)
    assert par.wait_ready(60) == 1
    (w,) = par._workers
    w.process.kill()
    w.process.wait()
    # its death unseen until the chunk is sent (it died after the batch began)
    monkeypatch.setattr(par, "start", lambda workers: None)
    w.conn.poll = lambda *a: False
    got = check_many(obs, jobs=2, timeout_s=10.0)
    assert par.running() == 0
    assert [_key(v) for v in got] == [_key(v) for v in check_many(obs, jobs=1, timeout_s=10.0)]


def test_a_script_without_a_main_guard_is_not_run_again_by_its_workers(tmp_path):
    """Workers import the prover only, never the caller's `__main__` (multiprocessing's
    spawn re-runs a script that lacks `if __name__ == "__main__"`)."""
    runs = tmp_path / "runs"
    script = tmp_path / "script.py"
    script.write_text(
        "import sys\n"
        f"open({str(runs)!r}, 'a').write('ran\\n')\n"
        f"sys.path.insert(0, {str(REPO / 'tests')!r})\n"
        "import prover.parallel as par\n"
        "from test_prover_parallel import _obligations\n"
        "par.start(1)\n"
        "assert par.wait_ready(60) == 1\n"
        "par.check_many(_obligations()[:4] * 4, jobs=2, timeout_s=10.0)\n"
        "assert par.COUNTS['workers'] > 0\n"
    )
    p = subprocess.run(
        [sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    assert runs.read_text() == "ran\n"


def test_workers_are_started_early_only_for_a_model_with_enough_obligations():
    from compiler.proving import prove

    par.shutdown()
    compile_model(matmul_activation(K=16, N=8, M=1), "bitwise", jobs=2)
    assert par.running() == 0  # one obligation: no worker at all
    m = matmul_activation(K=16, N=prove.EARLY_START_OBLIGATIONS, M=1, per_channel=True)
    # segments named: one obligation per column (auto proves them as one family)
    r = compile_model(m, "bitwise", "npu_backend/targets/npu_float.toml", jobs=2, solver="segments")
    assert par.running() == 1 and len(r.sites[0].obligations) == prove.EARLY_START_OBLIGATIONS
