"""Run the zoo's tasks on Dask distributed and collect one outcome per task.

- An embedded `LocalCluster` (`workers` processes of one thread, or threads of this
  process with `processes=False`; loopback only, no dashboard), or an existing cluster
  by scheduler address. No scheduler of our own.
- Every task reads and writes one shared proof store, so an obligation another task has
  already decided is served from its record instead of decided again (obligations are
  content-addressed by their canonical hash). Without `--proofs`, a run-local store in a
  temporary directory, signed by a key made for the run and served on that signature
  (`recheck_budget 0`): a record this run wrote is trusted as its own decision was.
- A task that fails (a tool bug, a worker that died) or runs past `task_timeout_s` is
  retried once; a second failure makes its outcome `unknown` with the reason. A timed-out
  task's worker is restarted where the cluster has nannies (process workers).
"""

from __future__ import annotations

import logging
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from compiler.cli.common import UsageError, one_line
from compiler.zoo.manifest import TaskSpec
from compiler.zoo.task import RunSettings, run_task

INSTALL_HINT = "prover zoo needs Dask distributed: pip install 'npu-fusion-prover[gate]'"
POLL_S = 0.2  # how often running tasks are looked at for their timeout
ATTEMPTS = 2  # a failed or timed-out task is retried once
CONNECT_S = 20.0  # --scheduler: to connect, and for a first worker to be there


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
    """All outcomes in manifest order, and how the run was carried."""

    outcomes: list[Outcome]
    wall_s: float
    workers: int
    scheduler: str
    store: str | None
    settings: RunSettings
    notes: list[str] = field(default_factory=list)


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
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
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
    task: Callable[[TaskSpec, RunSettings], dict[str, Any]] = run_task,
) -> ZooRun:
    """Check every task on the cluster; outcomes in the order of `specs`."""
    t0 = time.perf_counter()
    tmp = None
    notes = []
    if settings.proofs is None and settings.proofs_mode in (None, "rw"):
        if scheduler is None:  # a run-local store the local workers share
            tmp = Path(tempfile.mkdtemp(prefix="prover-zoo-"))
            key = tmp / "key"
            key.write_text(secrets.token_hex(32))
            settings = replace(
                settings,
                proofs=str(tmp / "store"),
                proofs_mode="rw",
                proof_key_file=str(key),
                recheck_budget_s=0.0,
            )
        else:
            notes.append(
                "no --proofs: obligations are not shared between tasks (name a store on a "
                "filesystem every worker sees)"
            )
    try:
        with client_for(workers, scheduler, processes) as (client, where, n):
            outcomes = _run_all(client, specs, settings, task_timeout_s, task, processes)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    store = None if tmp is not None else settings.proofs
    return ZooRun(outcomes, time.perf_counter() - t0, n, where, store, settings, notes)


def _executing(dask_worker: Any) -> list[str]:
    """Keys of the tasks a worker is running now (`Client.run` calls it on each worker)."""
    return [str(ts.key) for ts in dask_worker.state.executing]


def _run_all(
    client: Any,
    specs: list[TaskSpec],
    settings: RunSettings,
    timeout_s: float | None,
    task: Callable[[TaskSpec, RunSettings], dict[str, Any]],
    restartable: bool,
) -> list[Outcome]:
    from distributed import wait

    outcomes: list[Outcome | None] = [None] * len(specs)
    pending: dict[Any, tuple[int, int]] = {}  # future -> (task index, attempt)
    started: dict[str, tuple[float, str]] = {}  # key -> (first seen running, worker)
    run_id = secrets.token_hex(4)

    def submit(i: int, attempt: int) -> None:
        key = f"zoo-{run_id}-{i}-{attempt}"
        fut = client.submit(task, specs[i], settings, key=key, pure=False, retries=0)
        pending[fut] = (i, attempt)

    def failed(i: int, attempt: int, why: str) -> None:
        if attempt + 1 < ATTEMPTS:
            submit(i, attempt + 1)
        else:
            outcomes[i] = Outcome(specs[i], unknown_result(why, attempt + 1), attempt + 1)

    for i in range(len(specs)):
        submit(i, 0)
    while pending:
        try:
            done, _ = wait(list(pending), timeout=POLL_S, return_when="FIRST_COMPLETED")
        except TimeoutError:  # nothing finished within POLL_S
            done = set()
        for fut in done:
            i, attempt = pending.pop(fut)
            if fut.status == "finished":
                outcomes[i] = Outcome(specs[i], fut.result(), attempt + 1)
            elif fut.status != "cancelled":
                failed(i, attempt, _why(fut.exception()))
        if timeout_s is not None and pending:
            _enforce_timeout(client, pending, started, timeout_s, restartable, failed)
    return [o for o in outcomes if o is not None]


def _enforce_timeout(
    client: Any,
    pending: dict[Any, tuple[int, int]],
    started: dict[str, tuple[float, str]],
    timeout_s: float,
    restartable: bool,
    failed: Callable[[int, int, str], None],
) -> None:
    now = time.monotonic()
    try:
        running = client.run(_executing)
    except Exception:  # noqa: BLE001 - a worker that vanished meanwhile: look again later
        return
    for worker, keys in running.items():
        for k in keys:
            started.setdefault(k, (now, worker))
    by_key = {str(f.key): f for f in pending}
    for k, (t, worker) in list(started.items()):
        fut = by_key.get(k)
        if fut is None or now - t <= timeout_s:
            continue
        i, attempt = pending.pop(fut)
        del started[k]
        fut.cancel()
        if restartable:  # free the worker: its thread cannot be interrupted
            try:
                client.restart_workers([worker], raise_for_error=False)
            except Exception:  # noqa: BLE001 - no nanny (an external cluster): it finishes
                pass
        failed(i, attempt, f"timed out after {timeout_s:g} s (--task-timeout)")


def _why(e: BaseException | None) -> str:
    if e is None:
        return "the task failed without an error"
    from compiler.cli.common import one_line

    name = type(e).__name__
    if name == "KilledWorker":
        return "its worker died while running it"
    return f"internal error ({name}: {one_line(e)})"


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
