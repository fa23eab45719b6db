"""CPU and wall time of a command run as a child process (shared by the bench scripts).

CPU is the child's user + sys seconds (`RUSAGE_CHILDREN` before and after the run: the
child is waited for, so its whole time is counted), wall is `perf_counter` around it.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ChildRun:
    """One finished child: its CPU seconds (user + sys), wall seconds and the process."""

    cpu_s: float
    wall_s: float
    proc: subprocess.CompletedProcess


def run_child(
    argv: Sequence[str],
    *,
    cwd: str | Path | None = None,
    env: dict[str, str] | None = None,
    text: bool = False,
    ok: Collection[int] = (0,),
) -> ChildRun:
    """Run `argv` (output captured); exit with a one-line message if its code is not in `ok`."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(list(argv), capture_output=True, cwd=cwd, env=env, text=text)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in ok:
        err = p.stderr if text else p.stderr.decode(errors="replace")
        sys.exit(f"{' '.join(map(str, argv))} exited {p.returncode}: {err.strip()[-500:]}")
    cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
    return ChildRun(cpu, wall, p)


def repeat_child(argv: Sequence[str], repeat: int, **kw) -> list[ChildRun]:
    """`run_child(argv, **kw)` `repeat` times (at least once), in order."""
    return [run_child(argv, **kw) for _ in range(max(1, repeat))]
