"""The zoo gate against the sequential loop, in one run: dedup ratio and wall time.

One command:

    python3 bench/zoo_gate_bench.py                      # shipped examples + digits, 2 workers
    python3 bench/zoo_gate_bench.py --workers 2 --targets npu_float npu_fixed --policies bitwise

The zoo: every `*.onnx` under `examples/` (the digits models are one network quantized 16
ways, the small zoo's models an MLP, a CNN, an LSTM and a BERT in several variants, so their
obligations recur) x --targets x --policies. Three runs, in this order, none with a proof
store (so nothing is served: every obligation is decided):

- loop: `compiler.zoo.task.run_task` per task in this process, one after the other, each
  deciding its own obligations: what `prover check` one by one computes, without its
  start-up (so the loop is favoured: a shell loop of `prover check` also pays ~0.4 s of
  start-up per task);
- zoo: `compiler.zoo.run.run_zoo` on an embedded LocalCluster of --workers processes (the
  default of `prover zoo`), its start-up and shutdown included: models collect their
  obligations, each distinct one is decided once, models are assembled;
- zoo-threads: the same with `processes=False` (workers are threads of this process).

Printed: per run the wall seconds and the CPU seconds (this process and its reaped children:
the process workers, whose cluster is closed by then), and for the zoo runs the obligation
figures of the report (occurrences over all tasks, distinct hashes, shared by several
tasks, decided once in the deciding phase, decided inside a model run) and the dedup ratio
(occurrences / distinct), the model runs and the Dask tasks. Every zoo task's report
(verdicts, proof hashes, counterexamples, summary, MACs, host ops; not times) must equal the
loop's, else exit 1.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _cpu() -> float:
    """CPU seconds of this process and its reaped children (the process workers, once
    their cluster is closed)."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def _sites(rep: dict) -> dict:
    """The whole report but its times: sites (verdicts, proof hashes, counterexamples),
    summary, MACs, host ops, findings."""
    out = {k: v for k, v in rep.items() if k != "sites"}
    out["sites"] = [{k: v for k, v in s.items() if k != "time_ms"} for s in rep["sites"]]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--targets", nargs="+", default=["npu_float"])
    ap.add_argument("--policies", nargs="+", default=["bitwise"])
    ap.add_argument("--no-threads", action="store_true", help="skip the zoo-threads run")
    args = ap.parse_args(argv)

    from compiler.zoo.manifest import Defaults, TaskSpec, load
    from compiler.zoo.report import obligation_figures
    from compiler.zoo.run import run_zoo
    from compiler.zoo.task import RunSettings, run_task

    defaults = Defaults(targets=tuple(args.targets), policies=tuple(args.policies))
    specs: list[TaskSpec] = load(str(REPO / "examples"), defaults)
    print(
        f"zoo: {len(specs)} tasks ({len({s.label for s in specs})} models x "
        f"{len(args.targets)} target(s) x {len(args.policies)} policy(ies)), "
        f"{args.workers} workers"
    )

    # warm-up: this process's imports, paid before any run is timed (process workers are
    # forked from this process, so they start with them too)
    run_task(specs[0], RunSettings())
    t0, c0 = time.perf_counter(), _cpu()
    want, loop_obs = {}, 0
    for s in specs:
        r = run_task(s, RunSettings())
        want[s.key] = (r["status"], _sites(r["report"]) if "report" in r else r.get("reason"))
        loop_obs += len(r["obligations"])
    loop_s, loop_cpu = time.perf_counter() - t0, _cpu() - c0
    print(
        f"{'run':<12} {'wall':>8} {'vs loop':>8} {'cpu':>8} {'occur':>6} {'distinct':>8} "
        f"{'shared':>6} {'decided':>7} {'inline':>6} {'dedup':>6} {'runs':>5} {'tasks':>5}"
    )
    print(
        f"{'loop':<12} {loop_s:7.2f}s {1.0:7.2f}x {loop_cpu:7.2f}s {'':>6} {'':>8} {'':>6} "
        f"{loop_obs:>7} {'':>6} {'':>6} {len(specs):>5}"
    )
    runs = [("zoo", True)] + ([] if args.no_threads else [("zoo-threads", False)])
    bad = 0
    for name, processes in runs:
        c0 = _cpu()
        run = run_zoo(specs, RunSettings(), workers=args.workers, processes=processes)
        cpu = _cpu() - c0
        for o in run.outcomes:
            r = o.result
            got = (r["status"], _sites(r["report"]) if "report" in r else r.get("reason"))
            if got != want[o.spec.key]:
                bad += 1
                print(f"MISMATCH {name}: {o.spec.key}: {o.status} {r.get('reason', '')}")
        ob = obligation_figures(run)
        print(
            f"{name:<12} {run.wall_s:7.2f}s {run.wall_s / loop_s:7.2f}x {cpu:7.2f}s "
            f"{ob['occurrences']:>6} {ob['distinct']:>8} {ob['shared']:>6} {ob['decided']:>7} "
            f"{ob['inline']:>6} {ob['dedup_ratio']:>6.2f} {run.model_runs:>5} {run.dask_tasks:>5}"
        )
    if bad:
        print(f"{bad} task(s) differ from the sequential loop")
        return 1
    print("every zoo task's verdicts and proof hashes equal the sequential loop's")
    print("(loop: decided counts every task's own decisions; zoo: each distinct one once)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
