"""Where a run's CPU goes, by phase: a cheap recorder the pipeline always runs.

`with phase("lower"):` charges the CPU time (`time.process_time`, this process) spent
inside to "lower", exclusively: a phase opened inside another (the lowering's proofs
inside "lower") is charged to the inner one only, so the phases add up to the time
spent in any of them. Costs two clock reads per span (none for a span inside one of the
same name); spans wrap whole passes or batches, never single values.

With the environment variable `NPU_PHASES` set to a file path, the totals are written
there as JSON at exit (`{"phases": {name: cpu_s}, "cpu_s": ..., "peak_rss_kb": ...}`;
`bench/zoo_bench.py` reads it). Unset, nothing is written.
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager

ENV = "NPU_PHASES"
# The phases bench/zoo_bench.py reports, in pipeline order (anything else is "other").
PHASES = (
    "load",
    "frontend",
    "qdq_reading",
    "legality",
    "prove",
    "lower",
    "codegen",
    "ledger",
    "report",
)

TOTALS: dict[str, float] = {}
_stack: list[list] = []  # [name, start of its current exclusive stretch]


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Charge the CPU time spent inside (minus inner phases) to `name`."""
    if _stack and _stack[-1][0] == name:  # already charged to it: no clock read
        yield
        return
    now = time.process_time()
    if _stack:
        top = _stack[-1]
        TOTALS[top[0]] = TOTALS.get(top[0], 0.0) + now - top[1]
    _stack.append([name, now])
    try:
        yield
    finally:
        now = time.process_time()
        _, start = _stack.pop()
        TOTALS[name] = TOTALS.get(name, 0.0) + now - start
        if _stack:
            _stack[-1][1] = now


def snapshot() -> dict:
    """The totals so far, this process's CPU seconds and its peak RSS (KiB)."""
    return {
        "phases": {k: round(v, 6) for k, v in TOTALS.items()},
        "cpu_s": round(time.process_time(), 6),
        "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def _write() -> None:
    path = os.environ.get(ENV)
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(snapshot(), f)


if os.environ.get(ENV):
    atexit.register(_write)
