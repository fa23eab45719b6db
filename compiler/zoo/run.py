"""Run the zoo on Dask distributed and collect one outcome per task.

- An embedded `LocalCluster` (`workers` processes of one thread, forked from this process
  on Linux once it has imported the tool, so a worker starts in a fraction of a second
  instead of importing it again; or threads of this process with `processes=False`;
  loopback only, no dashboard), or an existing cluster by scheduler address. No scheduler
  of our own.
- The work runs in phases (`compiler.zoo.phases`): every model's obligations are collected
  by canonical hash without deciding them, each distinct one is decided once on the
  workers, and each model's verdicts are assembled from the answers. A proof store
  (`--proofs`) is read and written by the deciding phase as `prover check` would.
- A Dask task that fails (a tool bug, a worker that died) or runs past `task_timeout_s`
  (per model) is retried once, its items alone; a second failure makes a model `unknown`
  with the reason (and every model relying on an obligation whose decision was lost). A
  timed-out task's worker is restarted where the cluster has nannies (process workers).
"""

from __future__ import annotations

import importlib
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from compiler.cli.common import UsageError, one_line
from compiler.zoo.manifest import TaskSpec
from compiler.zoo.phases import Driver, ModelTask
from compiler.zoo.task import RunSettings, run_task

INSTALL_HINT = "prover zoo needs Dask distributed: pip install 'npu-fusion-prover[gate]'"
CONNECT_S = 20.0  # --scheduler: to connect, and for a first worker to be there
# imported before process workers are forked, so they start with them
TOOL_MODULES = (
    "numpy",
    "onnx",
    "onnxruntime",
    "compiler.api",
    "compiler.cli.check_run",
    "compiler.passes.pipeline",
    "compiler.report.json_form",
    "compiler.zoo.decide",
    "prover.api",
    "prover.parallel",
)


@dataclass
class Outcome:
    """What became of one task: the worker's result (`task.run_task`), or `unknown`."""

    spec: TaskSpec
    result: dict[str, Any]
    attempts: int = 1

    @property
    def status(self) -> str:
        return str(self.result["status"])


@dataclass
class ZooRun:
    """All outcomes in manifest order, how each obligation was answered, and how the run
    was carried."""

    outcomes: list[Outcome]
    wall_s: float
    workers: int
    scheduler: str
    store: str | None
    settings: RunSettings
    notes: list[str] = field(default_factory=list)
    answers: dict[str, str] = field(default_factory=dict)  # hash -> decided|served|error
    model_runs: int = 0  # model runs in all (collecting, assembling, retries)
    dask_tasks: int = 0


def require_distributed() -> None:
    """Raise `UsageError` (exit 2, one line) when Dask distributed is not installed."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise UsageError(INSTALL_HINT) from None


@contextmanager
def client_for(
    workers: int, scheduler: str | None, processes: bool = True
) -> Iterator[tuple[Any, str, int]]:
    """(client, scheduler description, worker count): connected to `scheduler`, else to a
    `LocalCluster` started here (loopback only, no dashboard) and closed on exit."""
    require_distributed()
    import dask
    from distributed import Client, LocalCluster

    if scheduler is not None:
        try:
            client = Client(scheduler, timeout=CONNECT_S)
        except (OSError, TimeoutError, ValueError) as e:
            raise UsageError(f"--scheduler {scheduler}: cannot connect: {one_line(e)}") from None
        try:
            try:
                client.wait_for_workers(1, timeout=CONNECT_S)
            except TimeoutError:
                raise UsageError(
                    f"--scheduler {scheduler}: no worker joined within {CONNECT_S:g} s "
                    "(start some: dask worker ADDRESS)"
                ) from None
            yield client, scheduler, len(client.scheduler_info().get("workers", {}))
        finally:
            client.close()
        return
    # our own retry (ATTEMPTS) is the only one: a task whose worker died fails at once
    # (in-process workers talk over inproc://, process workers over loopback TCP)
    where = {"host": "127.0.0.1"} if processes else {}
    config: dict[str, Any] = {"distributed.scheduler.allowed-failures": 0}
    if processes and sys.platform == "linux":
        # forked (also when a nanny restarts one): a worker has the tool imported at once
        for name in TOOL_MODULES:
            importlib.import_module(name)
        config["distributed.worker.multiprocessing-method"] = "fork"
    with ExitStack() as stack:
        stack.enter_context(dask.config.set(config))
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=processes,
            dashboard_address=None,
            silence_logs=logging.CRITICAL,  # a dead worker is reported per task, not logged
            **where,
        )
        try:
            with Client(cluster) as client:
                yield client, "local", workers
        finally:
            cluster.close()


def run_zoo(
    specs: list[TaskSpec],
    settings: RunSettings,
    *,
    workers: int = 2,
    scheduler: str | None = None,
    processes: bool = True,
    task_timeout_s: float | None = None,
    task: ModelTask = run_task,
) -> ZooRun:
    """Check every task on the cluster; outcomes in the order of `specs`. `task` runs one
    model (`compiler.zoo.task.run_task`'s signature; tests inject failures through it)."""
    t0 = time.perf_counter()
    with client_for(workers, scheduler, processes) as (client, where, n):
        driver = Driver(client, specs, settings, task, n, task_timeout_s, processes, unknown_result)
        phased = driver.run()
    outcomes = [Outcome(s, r, a) for s, (r, a) in zip(specs, phased.results, strict=True)]
    return ZooRun(
        outcomes,
        time.perf_counter() - t0,
        n,
        where,
        settings.proofs,
        settings,
        answers=phased.answers,
        model_runs=phased.model_runs,
        dask_tasks=phased.decide_tasks + phased.model_tasks,
    )


def unknown_result(why: str, attempts: int) -> dict[str, Any]:
    """The outcome of a task that never completed: `unknown`, never a pass."""
    from compiler.report.model import ExitCode

    return {
        "status": "unknown",
        "exit_code": int(ExitCode.UNKNOWN),
        "reason": f"{why}; tried {attempts} time(s)",
        "obligations": {},
        "time_s": 0.0,
    }
