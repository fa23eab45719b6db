"""pytest plugin: `--cpu-durations=N` lists the N tests that used the most CPU time.

CPU time (this process's, plus that of the subprocesses a test ran and waited for) does
not depend on what else the machine is doing, unlike `--durations`, so it is what the
suite's time budget is measured in. Setup (e.g. a module fixture) counts for the test
that triggered it. The total is printed too: the default suite should stay well under
its budget of 3 minutes on 2 cores (README, "Quick start"; `docs/testing.md`).
"""

from __future__ import annotations

import resource
import sys
import time

import pytest

_KEY = pytest.StashKey[dict[str, float]]()
_START = pytest.StashKey[float]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-durations",
        type=int,
        default=None,
        metavar="N",
        help="list the N tests using the most CPU time, own + subprocesses (0 = all)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_START] = _cpu()


def _cpu() -> float:
    own = time.process_time()
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    helpers = sys.modules.get("cli_helpers")  # commands run through its fork server
    served = helpers.SERVER_CPU[0] if helpers is not None else 0.0
    return own + ch.ru_utime + ch.ru_stime + served


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    if item.config.getoption("cpu_durations") is None:
        yield
        return
    t0 = _cpu()
    yield
    item.config.stash.setdefault(_KEY, {})[item.nodeid] = _cpu() - t0


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    n = config.getoption("cpu_durations")
    times = config.stash.get(_KEY, {})
    if n is None or not times:
        return
    rows = sorted(times.items(), key=lambda kv: -kv[1])
    tr = terminalreporter
    session = _cpu() - config.stash[_START]
    tr.write_sep(
        "=",
        f"CPU time: session {session:.1f} s (collection included), "
        f"tests {sum(times.values()):.1f} s in {len(times)}",
    )
    for nodeid, s in rows[: n or None]:
        tr.write_line(f"{s:8.2f}s  {nodeid}")
