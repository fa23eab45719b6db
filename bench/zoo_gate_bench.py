"""The zoo gate against the sequential loop, in one run: dedup ratio and wall time.

One command:

    python3 bench/zoo_gate_bench.py                      # shipped examples + digits, 2 workers
    python3 bench/zoo_gate_bench.py --workers 2 --targets npu_float npu_fixed --policies bitwise

The zoo: every `examples/*.onnx` and `examples/digits/*.onnx` (the digits models are one
network quantized 16 ways, so their obligations recur) x --targets x --policies. Three runs,
in this order, each from cold caches of the proof store (none / a fresh run-local one):

- loop: `compiler.cli.check_run.run_pipeline` per task in this process, one after the
  other, no store: what `prover check` one by one computes, without its start-up (so the
  loop is favoured: a shell loop of `prover check` also pays ~0.4 s of start-up per task);
- zoo: `compiler.zoo.run.run_zoo` on an embedded LocalCluster of --workers processes (the
  default of `prover zoo`), its start-up and shutdown included, and each worker's imports
  of the tool (this process imported it before the loop, untimed);
- zoo-threads: the same with `processes=False` (workers are threads of this process).

Printed: per run the wall seconds and the CPU seconds (this process and its reaped children:
the process workers, whose cluster is closed by then), and for the zoo runs the obligation figures of the report
(occurrences over all tasks, distinct hashes, shared by several tasks, decided, served) and
the dedup ratio (occurrences / distinct). Every zoo task's sites (verdicts, proof hashes,
counterexamples) must equal the loop's, else exit 1.
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


def _sites(rep: dict) -> list[dict]:
    return [{k: v for k, v in s.items() if k != "time_ms"} for s in rep["sites"]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--targets", nargs="+", default=["npu_float"])
    ap.add_argument("--policies", nargs="+", default=["bitwise"])
    ap.add_argument("--no-threads", action="store_true", help="skip the zoo-threads run")
    args = ap.parse_args(argv)

    from compiler.cli.check_run import CheckOptions, run_pipeline
    from compiler.report.json_form import report_json
    from compiler.zoo.manifest import Defaults, TaskSpec, load
    from compiler.zoo.report import obligation_figures
    from compiler.zoo.run import run_zoo
    from compiler.zoo.task import RunSettings
    from prover.policy import Policy

    defaults = Defaults(targets=tuple(args.targets), policies=tuple(args.policies))
    specs: list[TaskSpec] = load(str(REPO / "examples"), defaults)
    print(
        f"zoo: {len(specs)} tasks ({len({s.label for s in specs})} models x "
        f"{len(args.targets)} target(s) x {len(args.policies)} policy(ies)), "
        f"{args.workers} workers"
    )

    # warm-up: this process's imports, paid before any run is timed (process workers pay
    # their own, inside the zoo run)
    run_pipeline(str(REPO / "examples" / "matmul_sigmoid.onnx"), CheckOptions(progress=False))
    t0, c0 = time.perf_counter(), _cpu()
    want = {}
    for s in specs:
        opts = CheckOptions(
            policy=Policy.parse(s.policy), target=s.target, reference=s.reference, progress=False
        )
        want[s.key] = _sites(report_json(run_pipeline(s.model, opts).report))
    loop_s, loop_cpu = time.perf_counter() - t0, _cpu() - c0
    print(
        f"{'run':<12} {'wall':>8} {'vs loop':>8} {'cpu':>8} {'occur':>6} {'distinct':>8} "
        f"{'shared':>6} {'decided':>7} {'served':>6} {'dedup':>6}"
    )
    print(f"{'loop':<12} {loop_s:7.2f}s {1.0:7.2f}x {loop_cpu:7.2f}s")
    runs = [("zoo", True)] + ([] if args.no_threads else [("zoo-threads", False)])
    bad = 0
    for name, processes in runs:
        c0 = _cpu()
        run = run_zoo(specs, RunSettings(), workers=args.workers, processes=processes)
        cpu = _cpu() - c0
        for o in run.outcomes:
            got = o.result.get("report")
            if got is None or _sites(got) != want[o.spec.key]:
                bad += 1
                print(f"MISMATCH {name}: {o.spec.key}: {o.status} {o.result.get('reason', '')}")
        ob = obligation_figures(run)
        print(
            f"{name:<12} {run.wall_s:7.2f}s {run.wall_s / loop_s:7.2f}x {cpu:7.2f}s "
            f"{ob['occurrences']:>6} "
            f"{ob['distinct']:>8} {ob['shared']:>6} {ob['decided']:>7} {ob['served']:>6} "
            f"{ob['dedup_ratio']:>6.2f}"
        )
    if bad:
        print(f"{bad} task(s) differ from the sequential loop")
        return 1
    print("every zoo task's verdicts and proof hashes equal the sequential loop's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
