"""Deciding many obligations at once, in worker processes.

Z3's Python API is not thread-safe and a forked copy of a process that already
runs ONNX Runtime's thread pools is not safe either, so a worker is a fresh
interpreter (`subprocess`: fork and exec, as multiprocessing's "spawn") that imports
the prover and nothing of its parent: not its `__main__` (a caller's script is never
re-run) and no multiprocessing machinery (no resource-tracker process). Each
obligation is decided exactly as `api.check` decides it alone: the verdicts (and
counterexamples) do not depend on `jobs`.

A worker needs ~0.15-0.45 s to start, so workers are started once per process (`start`,
which returns at once: a caller that knows it will have work starts them early, e.g.
before reading a model) and reused by every later call. They run at a lower priority
(`NICE`): on an idle core that changes nothing, on a saturated machine they take only
spare CPU instead of slowing this process. `check_many` never waits for a worker: this
process decides from the end of the batch while each *ready* worker is handed chunks
from the front, shrinking as the batch runs out, and when they meet it decides what a
worker still holds. Workers are terminated (never awaited) at exit: one that was never
used, or is still importing, does not delay the process's exit.
"""

from __future__ import annotations

import atexit
import copy
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from . import segments
from .api import check
from .errors import ProverError
from .obligation import Obligation
from .verdict import Verdict

Result = Verdict | ProverError

MAX_CHUNK = 64  # obligations per hand-out at most (smaller as the batch runs out)
NICE = 19  # a worker's nice increment: on a saturated machine it takes ~1.5% from this one
SERVICE_S = 0.001  # how often this process looks for finished chunks while deciding its own
_READY = "ready"

# obligations decided "here" (in this process) and by "workers", over the process's life
COUNTS: Counter[str] = Counter()


def prefetch(obligations: Sequence[Obligation]) -> int:
    """Let `segments` compute the float-requantizer thresholds of a batch's epilogues in one
    vectorised pass (`segments.prefetch`; verdicts do not depend on it); the chains cached."""
    epilogues = [ob for ob in obligations if ob.kind == "epilogue"]
    return segments.prefetch(epilogues) if len(epilogues) > 1 else 0


def _decide(ob: Obligation, options: dict[str, Any]) -> Result:
    try:
        return check(ob, **options)
    except ProverError as e:  # returned, so the caller decides which errors are loud
        return e


def decide_chunk(
    obligations: Sequence[Obligation], options: dict[str, Any], pre: bool = False
) -> list[Result]:
    """`check(ob, **options)` for each obligation here (thresholds prefetched if `pre`)."""
    if pre:
        prefetch(obligations)
    return [_decide(ob, options) for ob in obligations]


@dataclass
class _Failure:
    """An exception a worker raised that is not a `ProverError` (a bug): re-raised here."""

    error: BaseException | None
    text: str


# A worker's first lines: leave Ctrl-C to the parent, lower its priority (if `nice` did
# not), take the parent's sys.path, then serve the socket it inherited (argv: marker,
# nice increment, sys.path, fd).
_BOOT = """import json, os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
try:
    os.nice(int(sys.argv[2]))
except OSError:
    pass
sys.path[:] = json.loads(sys.argv[3])
from prover.parallel import serve
serve(int(sys.argv[4]))
"""


def serve(fd: int) -> None:
    """A worker's loop on the connection at file descriptor `fd` (see `_serve`)."""
    _serve(Connection(fd))


def _serve(conn: Connection) -> None:
    """A worker: say ready (the prover is imported with this module), then decide the
    chunks sent until told to stop (None) or the parent goes away."""
    conn.send(_READY)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        key, obligations, options, pre = msg
        try:
            out: Any = decide_chunk(obligations, options, pre)
        except BaseException as e:  # noqa: BLE001 - sent to the parent, which re-raises it
            out = _Failure(e, traceback.format_exc())
            try:
                conn.send((key, out))
            except (EOFError, OSError):
                return
            except Exception:  # noqa: BLE001 - the exception itself does not pickle
                conn.send((key, _Failure(None, out.text)))
            continue
        try:
            conn.send((key, out))
        except (EOFError, OSError):  # the parent went away
            return


Chunk = tuple[int, int, int]  # (batch number, lo, hi): items [lo, hi) of that batch


@dataclass
class _Worker:
    process: subprocess.Popen
    conn: Connection
    ready: bool = False
    chunk: Chunk | None = None  # being decided there (its answer may outlive its batch)


_workers: list[_Worker] = []
_stopped: list[subprocess.Popen] = []  # terminated, maybe not yet exited
_lock = threading.RLock()  # one batch (and one start) at a time per process
_batches = 0  # batches begun in this process (a chunk's answer names its batch)


def start(workers: int) -> None:
    """Start `workers` worker processes unless that many are already running; returns
    without waiting for them to be ready (none is started where there is no interpreter
    to run: then everything is decided here)."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    with _lock:
        _start(workers)


def _start(workers: int) -> None:
    if len(_workers) == workers and all(w.process.poll() is None for w in _workers):
        return
    shutdown()
    _reap()
    if not sys.executable:
        return
    for _ in range(workers):
        mine, theirs = socket.socketpair()
        with theirs:
            fd = theirs.fileno()
            # `nice` lowers the priority before the interpreter starts (its start-up is
            # most of a worker's CPU); without it, the worker's first line does
            nice = shutil.which("nice")
            first = [nice, "-n", str(NICE)] if nice else []
            argv = ["prover-worker", "0" if nice else str(NICE), json.dumps(sys.path), str(fd)]
            try:
                p = subprocess.Popen(
                    [*first, sys.executable, "-c", _BOOT, *argv],
                    pass_fds=[fd],
                    # silent: a worker that cannot start or crashes only leaves its work
                    # to this process; its exceptions come back over the socket
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )  # in this session: with autogroup scheduling, a new one would void NICE
            except (OSError, ValueError):  # cannot start one here: decide in this process
                mine.close()
                return
        _workers.append(_Worker(p, Connection(mine.detach())))


def running() -> int:
    """The number of worker processes started and not yet stopped."""
    return len(_workers)


def ready() -> int:
    """The number of workers that have finished starting (polled, never waited for)."""
    for w in _workers:
        if not w.ready and w.conn.poll():
            _receive(w, None)
    return sum(w.ready for w in _workers)


def wait_ready(timeout_s: float) -> int:
    """Wait up to `timeout_s` for every worker to be ready; the number ready (for callers
    that want a warm pool before timing or testing, never on the deciding path)."""
    deadline = time.monotonic() + timeout_s
    while (n := ready()) < len(_workers) and time.monotonic() < deadline:
        wait([w.conn for w in _workers if not w.ready], deadline - time.monotonic())
    return n


def shutdown() -> None:
    """Stop every worker at once: terminated, never waited for (a starved low-priority
    worker can take a second to die on a saturated machine); reaped later or by init."""
    for w in list(_workers):
        _stop(w)


atexit.register(shutdown)


def _stop(w: _Worker) -> None:
    if w.process.poll() is None:
        w.process.terminate()
    w.conn.close()
    _workers.remove(w)
    _stopped.append(w.process)


def _reap() -> None:
    """Forget stopped workers that have exited (`poll` reaps them; never blocks)."""
    _stopped[:] = [p for p in _stopped if p.poll() is None]


def _drop(w: _Worker) -> None:
    """Forget a worker that died (what it held is decided here: `_Batch.run`)."""
    _stop(w)


def _receive(w: _Worker, batch: _Batch | None) -> None:
    """Read one message from `w` (it must have one): ready, or the answer to its chunk,
    kept only if that chunk belongs to `batch` and is not yet decided here."""
    try:
        msg = w.conn.recv()
    except (EOFError, OSError):
        _drop(w)
        return
    if msg == _READY:
        w.ready = True
        return
    (number, lo, hi), out = msg
    w.chunk = None
    if batch is None or number != batch.number:
        return  # a chunk of an earlier batch that this process decided itself meanwhile
    if isinstance(out, _Failure):
        if out.error is not None:
            raise out.error
        raise RuntimeError(f"a prover worker failed:\n{out.text}")
    for i, v in enumerate(out, lo):
        if batch.results[i] is None:
            batch.results[i] = v


def _size(left: int, jobs: int) -> int:
    """Guided chunk size: large while much is left, down to 1 at the end (balance)."""
    return max(1, min(MAX_CHUNK, left // (2 * jobs)))


class _Batch:
    """One `check_many` call: ready workers take chunks from the front, this process
    decides from the back; when they meet, this process also decides whatever a worker
    still holds (the first answer for an item is kept: both are the same verdict), so it
    never waits for a slow, starting or dead worker."""

    def __init__(
        self, items: list[Obligation], jobs: int, options: dict[str, Any], pre: bool
    ) -> None:
        global _batches
        _batches += 1
        self.number = _batches
        self.items, self.jobs, self.options, self.pre = items, jobs, options, pre
        self.results: list[Any] = [None] * len(items)  # None: not decided yet
        self.front, self.back = 0, len(items)
        self.next_service = 0.0

    def service(self) -> None:
        """Collect what workers have finished; hand each ready, idle worker a chunk."""
        self.next_service = time.perf_counter() + SERVICE_S
        for w in [w for w in _workers if w.conn.poll()]:
            _receive(w, self)
        for w in list(_workers):
            if w.ready and w.chunk is None and self.front < self.back:
                lo, hi = self.front, self.front + _size(self.back - self.front, self.jobs)
                chunk = [_slim(ob) for ob in self.items[lo:hi]]
                try:
                    w.conn.send(((self.number, lo, hi), chunk, self.options, self.pre))
                except (EOFError, OSError):  # it died since it last answered
                    _drop(w)
                    continue
                w.chunk = (self.number, lo, hi)
                self.front = hi
                COUNTS["workers"] += hi - lo

    def decide_here(self, indices: Sequence[int]) -> None:
        """Decide the items at `indices` not decided yet, servicing the workers between."""
        todo = [i for i in indices if self.results[i] is None]
        if self.pre:
            prefetch([self.items[i] for i in todo])
        for i in todo:
            if self.results[i] is None:
                self.results[i] = _decide(self.items[i], self.options)
                COUNTS["here"] += 1
            if time.perf_counter() >= self.next_service:
                self.service()

    def run(self) -> list[Any]:
        while self.front < self.back:
            self.service()
            n = _size(self.back - self.front, self.jobs)
            self.back -= n
            self.decide_here(range(self.back, self.back + n))
        # the rest is in workers' hands: decide here what they have not answered yet
        self.decide_here(range(len(self.items) - 1, -1, -1))
        return self.results


def _slim(ob: Obligation) -> Obligation:
    """`ob` without its cached canonical text (most of its pickle; rebuilt if needed),
    keeping the cached hash."""
    if "canonical" not in vars(ob):
        return ob
    c = copy.copy(ob)
    del vars(c)["canonical"]
    return c


def check_many(
    obligations: Sequence[Obligation], jobs: int = 1, *, prefetch: bool = False, **options: Any
) -> list[Verdict | ProverError]:
    """`check(ob, **options)` for each obligation, in `jobs` processes (this one and
    `jobs - 1` workers, started here if `start` was not called); results in order.
    `prefetch`: compute the float-requantizer thresholds of each chunk in one vectorised
    pass first (for `segments`; verdicts do not depend on it).

    A `ProverError` is returned in place of its verdict (never swallowed: the
    caller sees it); any other exception propagates. This process never waits for a
    worker: the batch may well be decided here alone.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    items = list(obligations)
    if jobs == 1 or len(items) < 2:
        return decide_chunk(items, options, prefetch)
    with _lock:
        start(jobs - 1)
        try:
            return _Batch(items, jobs, options, prefetch).run()
        except BaseException:
            shutdown()  # workers may hold chunks of this batch: none may answer a later one
            raise
