"""The zoo's phases on one Dask client: models map to their obligations, each distinct
obligation is decided once, each model's verdicts are assembled from the answers.

1. **Collect**: every model runs with nothing known and every obligation deferred
   (`compiler.zoo.task`, `collect`): it answers `pending` with its obligations, by
   canonical hash, undecided (or its final result, if it needed none: a model refused
   as bad input, a float model).
2. **Decide**: each hash not seen before is decided once, in chunks, on the workers
   (`compiler.zoo.decide`), however many models share it.
3. **Assemble**: a model whose every obligation is answered runs again with those answers
   `known`, on the worker that ran it before where it can (its caches are warm), and
   gives its report; if the answers lead it somewhere new (a refutation asks for synthesis,
   a lowering obligation appears), it answers `pending` again and goes back to 2.
   After `COLLECTING_RUNS` runs a model decides what is still new itself.

The phases overlap: a model's obligations are decided as soon as it has collected them,
and it is assembled as soon as they are answered. Small work is batched (several models,
or many obligations, per Dask task; sized by file size) so the per-task cost of the
scheduler is paid rarely.

A Dask task that fails (a tool bug, a worker that died) or runs past its timeout is
retried once, each of its items alone; a second failure makes a model `unknown` with the
reason, and an obligation a `DecisionLost` error, which makes every model relying on it
`unknown`. Never a silent pass.
"""

from __future__ import annotations

import math
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compiler.zoo.decide import DecisionLost, answer_kind, decide_chunk
from compiler.zoo.manifest import TaskSpec
from compiler.zoo.task import RunSettings

POLL_S = 0.2  # how often running tasks are looked at for their timeout
ATTEMPTS = 2  # a failed or timed-out Dask task is retried once (its items alone)
COLLECTING_RUNS = 4  # model runs that defer new obligations; the next decides them itself
BATCHES_PER_WORKER = 4  # models per batch: about total size / (workers x this)
MAX_BATCH = 8  # models in one Dask task at most
CHUNK_MIN, CHUNK_MAX = 16, 128  # obligations in one Dask task
PRIORITY = {"decide": 2, "assemble": 1, "collect": 0}  # answers first: they unblock models

ModelTask = Callable[..., dict[str, Any]]


@dataclass
class Job:
    """One Dask task: a batch of models (their indexes) or a chunk of obligation hashes."""

    kind: str  # "models" | "obligations"
    items: list[Any]
    attempt: int
    timeout_s: float | None


@dataclass
class Phased:
    """What the phases produced: one final result per model, and the obligations' answers."""

    results: list[tuple[dict[str, Any], int]]  # (result, attempts) in the order of the specs
    answers: dict[str, str]  # obligation hash -> "decided" | "served" | "error"
    model_runs: int
    decide_tasks: int
    model_tasks: int


def run_models(
    items: list[tuple[int, TaskSpec, dict[str, Any], bool]],
    settings: RunSettings,
    task: ModelTask,
) -> tuple[str, list[tuple[int, dict[str, Any] | None, str]]]:
    """On a worker: run each model (index, spec, known, collect); (this worker's address,
    [(index, result or None, why it failed)])."""
    out: list[tuple[int, dict[str, Any] | None, str]] = []
    for i, spec, known, collect in items:
        try:
            out.append((i, task(spec, settings, known, collect), ""))
        except Exception as e:  # noqa: BLE001 - a tool bug: this model is retried alone
            out.append((i, None, why_failed(e)))
    return _worker_address(), out


def _worker_address() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except ValueError:  # not on a worker
        return ""


def why_failed(e: BaseException | None) -> str:
    """A failure's reason, in one line."""
    if e is None:
        return "the task failed without an error"
    from compiler.cli.common import one_line

    name = type(e).__name__
    if name == "KilledWorker":
        return "its worker died while running it"
    return f"internal error ({name}: {one_line(e)})"


def _executing(dask_worker: Any) -> list[str]:
    """Keys of the tasks a worker is running now (`Client.run` calls it on each worker)."""
    return [str(ts.key) for ts in dask_worker.state.executing]


class Driver:
    """Runs the phases of one zoo on `client`; `run()` returns a `Phased`."""

    def __init__(
        self,
        client: Any,
        specs: list[TaskSpec],
        settings: RunSettings,
        task: ModelTask,
        workers: int,
        task_timeout_s: float | None,
        restartable: bool,
        unknown: Callable[[str, int], dict[str, Any]],
    ) -> None:
        self.client, self.specs, self.settings, self.task = client, specs, settings, task
        self.workers, self.timeout_s, self.restartable = (
            max(1, workers),
            task_timeout_s,
            restartable,
        )
        self.unknown = unknown
        n = len(specs)
        self.results: list[tuple[dict[str, Any], int] | None] = [None] * n
        self.known: list[dict[str, Any]] = [{} for _ in range(n)]
        self.waiting_on: list[set[str]] = [set() for _ in range(n)]
        self.runs = [0] * n
        self.tries = [1] * n  # the most attempts any run of the model took
        self.time_s = [0.0] * n
        self.where: list[str] = [""] * n
        self.size = [_size(s.model) for s in specs]
        self.batch_bytes = sum(self.size) / (self.workers * BATCHES_PER_WORKER) or 1.0
        self.obligation: dict[str, Any] = {}  # hash -> obligation, asked for by some model
        self.waiters: dict[str, set[int]] = {}  # hash -> models waiting for its answer
        self.answer: dict[str, Any] = {}  # hash -> verdict | error
        self.ready: list[tuple[int, int]] = []  # (model, attempt) to run
        self.to_decide: list[tuple[str, int]] = []  # (hash, attempt) to decide
        self.pending: dict[Any, Job] = {}
        self.started: dict[str, tuple[float, str]] = {}  # key -> (first seen running, worker)
        self.run_id = secrets.token_hex(4)
        self.serial = 0
        self.counts = {"models": 0, "obligations": 0}

    # --- the loop -----------------------------------------------------------------------

    def run(self) -> Phased:
        from distributed import wait

        self.ready = [(i, 0) for i in range(len(self.specs))]
        self._flush()
        while self.pending:
            try:
                done, _ = wait(list(self.pending), timeout=POLL_S, return_when="FIRST_COMPLETED")
            except TimeoutError:  # nothing finished within POLL_S
                done = set()
            for fut in done:
                job = self.pending.pop(fut)
                if fut.status == "finished":
                    self._finished(job, fut.result())
                elif fut.status != "cancelled":
                    self._failed(job, why_failed(fut.exception()))
            if self.timeout_s is not None and self.pending:
                self._enforce_timeout()
            self._flush()
        results = [r for r in self.results if r is not None]
        assert len(results) == len(self.specs), "a model without a result"
        return Phased(
            results,
            {h: answer_kind(v) for h, v in self.answer.items()},
            sum(self.runs),
            self.counts["obligations"],
            self.counts["models"],
        )

    def _submit(self, fn: Callable[..., Any], job: Job, *args: Any, **kw: Any) -> None:
        self.serial += 1
        key = f"zoo-{self.run_id}-{job.kind}-{self.serial}"
        fut = self.client.submit(fn, *args, key=key, pure=False, retries=0, **kw)
        self.pending[fut] = job
        self.counts[job.kind] += 1

    def _flush(self) -> None:
        """Submit what is ready: obligations to decide in chunks, models in batches."""
        todo, self.to_decide = self.to_decide, []
        for attempt in sorted({a for _, a in todo}):
            hashes = [h for h, a in todo if a == attempt]
            size = 1 if attempt else _chunk(len(hashes), self.workers)  # a retry: alone
            for k in range(0, len(hashes), size):
                part = hashes[k : k + size]
                job = Job("obligations", part, attempt, self.timeout_s)
                obs = [self.obligation[h] for h in part]
                self._submit(decide_chunk, job, obs, self.settings, priority=PRIORITY["decide"])
        ready, self.ready = self.ready, []
        groups: dict[tuple[str, int], list[int]] = {}
        for i, attempt in ready:
            groups.setdefault((self.where[i], attempt), []).append(i)
        for (where, attempt), idx in groups.items():
            for batch in self._batches(idx, alone=attempt > 0):
                self._submit_models(batch, attempt, where)

    def _batches(self, idx: list[int], alone: bool) -> list[list[int]]:
        """Models in batches of about `batch_bytes` (large ones alone), largest first."""
        if alone:
            return [[i] for i in idx]
        out: list[list[int]] = []
        cur: list[int] = []
        acc = 0.0
        for i in sorted(idx, key=lambda j: -self.size[j]):
            cur.append(i)
            acc += self.size[i]
            if acc >= self.batch_bytes or len(cur) >= MAX_BATCH:
                out.append(cur)
                cur, acc = [], 0.0
        if cur:
            out.append(cur)
        return out

    def _submit_models(self, batch: list[int], attempt: int, where: str) -> None:
        items = [
            (i, self.specs[i], dict(self.known[i]), self.runs[i] < COLLECTING_RUNS) for i in batch
        ]
        timeout = None if self.timeout_s is None else self.timeout_s * len(batch)
        job = Job("models", batch, attempt, timeout)
        first = all(self.runs[i] == 0 for i in batch)
        pin = {"workers": [where], "allow_other_workers": True} if where else {}
        prio = PRIORITY["collect" if first else "assemble"]
        self._submit(run_models, job, items, self.settings, self.task, priority=prio, **pin)

    # --- results ------------------------------------------------------------------------

    def _finished(self, job: Job, value: Any) -> None:
        if job.kind == "obligations":
            for h, v in value.items():
                self._answered(h, v)
            return
        where, out = value
        for i, result, why in out:
            if result is None:
                self._model_failed(i, job.attempt, why)
                continue
            self.runs[i] += 1
            self.tries[i] = max(self.tries[i], job.attempt + 1)
            self.time_s[i] += float(result.get("time_s", 0.0))
            self.where[i] = where
            if result["status"] == "pending":
                self._collected(i, result["needs"])
            else:
                self._final(i, result, self.tries[i])

    def _collected(self, i: int, needs: dict[str, Any]) -> None:
        for h, ob in needs.items():
            if h in self.answer:
                self.known[i][h] = self.answer[h]
                continue
            self.waiting_on[i].add(h)
            if h not in self.obligation:  # first asked for: decided once, for every model
                self.obligation[h] = ob
                self.waiters[h] = set()
                self.to_decide.append((h, 0))
            self.waiters[h].add(i)
        if not self.waiting_on[i]:
            self.ready.append((i, 0))

    def _answered(self, h: str, v: Any) -> None:
        self.answer[h] = v
        for i in sorted(self.waiters.pop(h, ())):
            self.known[i][h] = v
            self.waiting_on[i].discard(h)
            if not self.waiting_on[i]:
                self.ready.append((i, 0))

    def _final(self, i: int, result: dict[str, Any], attempts: int) -> None:
        lost = [
            h for h in result.get("obligations", {}) if isinstance(self.answer.get(h), DecisionLost)
        ]
        if lost:  # an obligation it relies on has no verdict: the model is unknown
            e = self.answer[lost[0]]
            result = self.unknown(f"obligation {lost[0]}: {e.why}", e.attempts) | {
                "obligations": result["obligations"]
            }
        result = dict(result, time_s=self.time_s[i])
        self.results[i] = (result, attempts)

    # --- failures -----------------------------------------------------------------------

    def _failed(self, job: Job, why: str) -> None:
        if job.kind == "models":
            for i in job.items:
                self._model_failed(i, job.attempt, why)
            return
        for h in job.items:
            if job.attempt + 1 < ATTEMPTS:
                self.to_decide.append((h, job.attempt + 1))
            else:
                why = why.replace("running it", "deciding it")
                self._answered(h, DecisionLost(why, job.attempt + 1))

    def _model_failed(self, i: int, attempt: int, why: str) -> None:
        if attempt + 1 < ATTEMPTS:
            self.ready.append((i, attempt + 1))
        else:
            self.results[i] = (self.unknown(why, attempt + 1), attempt + 1)

    def _enforce_timeout(self) -> None:
        now = time.monotonic()
        try:
            running = self.client.run(_executing)
        except Exception:  # noqa: BLE001 - a worker that vanished meanwhile: look again later
            return
        for worker, keys in running.items():
            for k in keys:
                self.started.setdefault(k, (now, worker))
        by_key = {str(f.key): f for f in self.pending}
        for k, (t, worker) in list(self.started.items()):
            fut = by_key.get(k)
            if fut is None:
                del self.started[k]
                continue
            job = self.pending[fut]
            if job.timeout_s is None or now - t <= job.timeout_s:
                continue
            del self.pending[fut], self.started[k]
            fut.cancel()
            if self.restartable:  # free the worker: its thread cannot be interrupted
                try:
                    self.client.restart_workers([worker], raise_for_error=False)
                except Exception:  # noqa: BLE001 - no nanny (an external cluster): it finishes
                    pass
            limit = self.timeout_s if self.timeout_s is not None else job.timeout_s
            self._failed(job, f"timed out after {limit:g} s (--task-timeout)")


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _chunk(n: int, workers: int) -> int:
    """Obligations per Dask task: enough tasks for every worker, none too small or large."""
    return max(CHUNK_MIN, min(CHUNK_MAX, math.ceil(n / (2 * workers))))
