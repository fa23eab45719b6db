"""Cold decisions of two source trees, compared in alternating subprocesses.

run_bench's cold median moves by tens of percent with a shared host's state, more than a
change to the decision usually does. This runs the same 12 epilogue obligations as
`run_bench.py` (5 cold runs each: a newly built obligation, the decision's caches
cleared) in a fresh process per tree, alternating the trees for `--rounds` rounds, and
prints per tree each obligation's minimum over the rounds (the least disturbed run) and
their median, beside the per-round medians run_bench's target reads.

    python3 bench/cold_ab.py /tmp/old_tree /tmp/new_tree --rounds 8

A tree is a checkout or a `git archive` of the repository (its `prover` is imported).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_CHILD = r"""
import json, statistics, sys, time
tree = sys.argv[1]
sys.path[:0] = [tree + "/bench", tree]
import prover
assert prover.__file__.startswith(tree), prover.__file__
import run_bench as RB
from prover import segments
from prover.api import check

check(RB.obligations(2)[0][2].with_policy("bounded:1"))  # the process's warm-up
n = len(RB.obligations(4))
runs = [[] for _ in range(n)]
for _ in range(5):
    for i in range(n):
        segments.clear_shared_steps()
        ob = RB.obligations(4)[i][2]
        t = time.process_time()
        check(ob, timeout_s=10)
        runs[i].append(time.process_time() - t)
print(json.dumps([statistics.median(r) for r in runs]))
"""


def _round(tree: str) -> list[float]:
    """Each obligation's median cold CPU seconds in one fresh process of `tree`."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, os.path.abspath(tree)],
        env=env,
        capture_output=True,
        text=True,
        cwd=os.path.abspath(tree),
        check=False,
    )
    if out.returncode:
        raise SystemExit(f"{tree}: {out.stderr.strip().splitlines()[-1]}")
    return [float(x) for x in json.loads(out.stdout)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs=2, help="two source trees (checkouts or git archives)")
    ap.add_argument("--rounds", type=int, default=6, help="alternating rounds (default 6)")
    args = ap.parse_args()
    got: dict[str, list[list[float]]] = {t: [] for t in args.trees}
    for _ in range(args.rounds):
        for t in args.trees:
            got[t].append(_round(t))
    for t, rounds in got.items():
        mins = [min(col) * 1000 for col in zip(*rounds, strict=True)]
        meds = [statistics.median(r) * 1000 for r in rounds]
        print(f"{t}")
        print(f"  median of the obligations' minima: {statistics.median(mins):.3f} ms")
        print("  minima (ms): " + " ".join(f"{m:.2f}" for m in mins))
        print("  per-round medians (ms): " + " ".join(f"{m:.2f}" for m in meds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
