"""The ledger of `npuc compile`: one regenerate-and-simulate per fusion (old) vs two runs (new).

One command (issue 15 item 5):

    python3 bench/ledger_bench.py                 # 16, 64 and 256 sites
    python3 bench/ledger_bench.py --sites 16 64   # quicker

Per size, a chain of QLinearMatMul -> QLinearSigmoid sites (16x16 int8 weights, one row,
`bench/fusion_models.chain`) on the default target. Measured in this one run, CPU time of
this process: `generate` (the program `npuc compile` writes, for scale), the old ledger
(kept here only: for every fusion, regenerate the whole program with that site split and
simulate it) and the new one (`npu_backend.ledger.ledger`: the fused and the fully
unfused program simulated once each, counters attributed per instruction). Both must
give the same per-site intermediate bytes, else the run stops.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fusion_models import chain  # noqa: E402

from npu_backend.codegen import generate  # noqa: E402
from npu_backend.ledger import LedgerError, ledger, random_inputs, unfuse_with_add  # noqa: E402
from npu_backend.lowered import LoweredModel, NpuMatMul  # noqa: E402
from npu_backend.simulator import run  # noqa: E402
from npu_backend.target import Target, load_target  # noqa: E402


def old_ledger(lowered: LoweredModel, target: Target) -> list[tuple[str, int, int]]:
    """The per-fusion ledger `npuc compile` used before: (site, bytes not written, not read)."""
    inputs = random_inputs(lowered.inputs)
    fused_out, fc = run(generate(lowered, target), inputs)
    out = []
    for k, st in enumerate(lowered.steps):
        if not (isinstance(st, NpuMatMul) and st.fused):
            continue
        split, extra = unfuse_with_add(st)
        steps = lowered.steps[:k] + split + lowered.steps[k + 1 :]
        model = LoweredModel(
            list(lowered.inputs), list(lowered.outputs), {**lowered.constants, **extra}, steps
        )
        got, uc = run(generate(model, target), inputs)
        for name in fused_out:
            if not np.array_equal(fused_out[name], got[name]):
                raise LedgerError(f"{st.name}: fused and unfused programs differ on {name!r}")
        out.append(
            (
                st.name,
                uc.bytes_written["sram"] - fc.bytes_written["sram"],
                uc.bytes_read["sram"] - fc.bytes_read["sram"],
            )
        )
    return out


def _cpu(f, *args):
    t0 = time.process_time()
    v = f(*args)
    return time.process_time() - t0, v


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sites", type=int, nargs="+", default=[16, 64, 256])
    args = ap.parse_args()
    target = load_target()
    print(f"{'sites':>5} {'generate':>9} {'old ledger':>11} {'new ledger':>11} {'old/new':>8}")
    for n in args.sites:
        model = chain(target, n)
        t_gen, _ = _cpu(generate, model, target)
        t_new, new = _cpu(ledger, model, target)
        t_old, old = _cpu(old_ledger, model, target)
        got = [(e.site, e.bytes_not_written, e.bytes_not_read) for e in new]
        if got != old:
            sys.exit(f"{n} sites: old and new ledgers disagree on the intermediate bytes")
        print(f"{n:5d} {t_gen:8.2f}s {t_old:10.2f}s {t_new:10.2f}s {t_old / t_new:7.1f}x")
    print("CPU seconds of this process; old/new: how much the two-run ledger saves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
