"""Deciding many obligations at once, in worker processes.

Z3's Python API is not thread-safe and a forked copy of a process that already
runs ONNX Runtime's thread pools is not safe either, so workers are *spawned*
processes. Each obligation is decided exactly as `api.check` decides it alone:
the verdicts (and counterexamples) do not depend on `jobs`.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from .api import check
from .errors import ProverError
from .obligation import Obligation
from .verdict import Verdict


def _decide(item: tuple[Obligation, dict[str, Any]]) -> Verdict | ProverError:
    ob, options = item
    try:
        return check(ob, **options)
    except ProverError as e:  # returned, so the caller decides which errors are loud
        return e


def check_many(
    obligations: Sequence[Obligation], jobs: int = 1, **options: Any
) -> list[Verdict | ProverError]:
    """`check(ob, **options)` for each obligation, in `jobs` processes; results in order.

    A `ProverError` is returned in place of its verdict (never swallowed: the
    caller sees it); any other exception propagates.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    items = [(ob, dict(options)) for ob in obligations]
    if jobs == 1 or len(items) < 2:
        return [_decide(it) for it in items]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(jobs, len(items)), mp_context=ctx) as pool:
        return list(pool.map(_decide, items))
