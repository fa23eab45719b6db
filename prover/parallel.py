"""Deciding many obligations at once, in worker processes.

Z3's Python API is not thread-safe and a forked copy of a process that already
runs ONNX Runtime's thread pools is not safe either, so workers are *spawned*
processes. Each obligation is decided exactly as `api.check` decides it alone:
the verdicts (and counterexamples) do not depend on `jobs`.

Starting a worker costs a fresh interpreter and the prover's imports, so the pool is
started once per process and size and reused by every later call (shut down at exit);
whether a batch is worth sending to it is the caller's choice (`compiler.proving.prove`).
"""

from __future__ import annotations

import atexit
import multiprocessing
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from .api import check
from .errors import ProverError
from .obligation import Obligation
from .verdict import Verdict

_pool: ProcessPoolExecutor | None = None
_pool_size = 0


def _decide(item: tuple[Obligation, dict[str, Any]]) -> Verdict | ProverError:
    ob, options = item
    try:
        return check(ob, **options)
    except ProverError as e:  # returned, so the caller decides which errors are loud
        return e


def pool(jobs: int) -> ProcessPoolExecutor:
    """The process's worker pool of `jobs` spawned processes (started on first use)."""
    global _pool, _pool_size
    if _pool is None or _pool_size != jobs:
        shutdown()
        _pool = ProcessPoolExecutor(
            max_workers=jobs, mp_context=multiprocessing.get_context("spawn")
        )
        _pool_size = jobs
    return _pool


def shutdown() -> None:
    """Stop the worker pool, if one was started."""
    global _pool, _pool_size
    if _pool is not None:
        _pool.shutdown(wait=True, cancel_futures=True)
    _pool, _pool_size = None, 0


atexit.register(shutdown)


def check_many(
    obligations: Sequence[Obligation], jobs: int = 1, **options: Any
) -> list[Verdict | ProverError]:
    """`check(ob, **options)` for each obligation, in `jobs` processes (this one and
    `jobs - 1` workers); results in order.

    A `ProverError` is returned in place of its verdict (never swallowed: the
    caller sees it); any other exception propagates.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    items = [(ob, dict(options)) for ob in obligations]
    if jobs == 1 or len(items) < 2:
        return [_decide(it) for it in items]
    # The calling process is one of the `jobs`: it decides the first share itself while
    # `jobs - 1` workers (one fewer to start) decide the rest.
    own = len(items) // jobs
    chunk = max(1, (len(items) - own) // (4 * (jobs - 1)))  # few round trips, balanced
    theirs = pool(jobs - 1).map(_decide, items[own:], chunksize=chunk)
    mine = [_decide(it) for it in items[:own]]
    return mine + list(theirs)
