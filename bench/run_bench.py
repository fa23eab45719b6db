"""Benchmark: the prover's solving vs Z3's default tactic vs exhaustive enumeration.

One command, one run, the same obligations for every contender:

    python3 bench/run_bench.py [--z3-cap 30] [--enum-cap 30] [--per-k 4]

Obligations: gemmlowp requantize (double rounding) + 256-entry Sigmoid LUT
epilogues over the exact accumulator range of one int8 x int8 weights column
(seeded), for K = 64, 512 and 4096. Per K, half are equivalent rewrites (LUT
stored in two's complement order with the table reordered; requantize to
int16 then saturate to int8) and half carry a seeded bug (single instead of
double rounding: a one-step rounding difference; output zero point off by one).

Times are CPU seconds of this process (every contender runs in process, single
threaded), so a loaded machine does not distort the ratios; ours is also shown
as wall time. Columns: ours = `prover.api.check` (portfolio, 10 s budget, no store; median of
3 runs, the others run once);
z3 = Z3 default `Solver()` on the obligation's SMT-LIB2 text (capped; a
timeout counts as >= cap); enum = `prover.enumerate` over the whole range
(capped the same way); bzla = one Bitwuzla query on the same text.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import z3

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prover import enumerate as penum  # noqa: E402
from prover.api import check  # noqa: E402
from prover.inttypes import INT8  # noqa: E402
from prover.lut import LutSpec, build_lut, reorder_table  # noqa: E402
from prover.matmul import accumulator_range  # noqa: E402
from prover.obligation import LiftSpec, Obligation  # noqa: E402
from prover.proofstore import ProofStore  # noqa: E402
from prover.requant import quantize_multiplier  # noqa: E402
from prover.smtlib import to_smtlib  # noqa: E402
from prover.solvers import Budget, run  # noqa: E402
from prover.terms import Var, op  # noqa: E402

SEED = 20261130


def epilogue(
    m: int, s: int, zp: int, table, *, rounding="requant_double", mid="int8", order="offset"
):
    acc = Var("acc")
    r = op(rounding, acc, multiplier=m, shift=s, zp=zp, out=mid)
    if mid != "int8":
        r = op("saturate", r, type="int8")
    return op("lut", r, table=tuple(int(v) for v in table), in_type="int8", index_order=order)


def obligations(per_k: int) -> list[tuple[str, bool, Obligation]]:
    rng = np.random.default_rng(SEED)
    table = build_lut(
        LutSpec(
            function="sigmoid",
            in_scale=0.0625,
            in_zp=0,
            in_type="int8",
            out_scale=1 / 256,
            out_zp=-128,
            out_type="int8",
        )
    )
    table_tc = reorder_table(table, INT8, "offset", "twos_complement")
    out = []
    for k in (64, 512, 4096):
        w = rng.integers(-128, 128, size=(k, 1))
        lo, hi = accumulator_range(w, 0, INT8, 0).overall
        scale = float(1.0 / (np.sqrt(k) * 96.0)) * float(rng.uniform(0.8, 1.25))
        m, s = quantize_multiplier(scale)
        zp = int(rng.integers(-8, 9))
        before = epilogue(m, s, zp, table)
        variants = [
            (
                "equiv: LUT in two's complement order",
                True,
                epilogue(m, s, zp, table_tc, order="twos_complement"),
            ),
            ("bug: single rounding", False, epilogue(m, s, zp, table, rounding="requant_single")),
            ("equiv: requant to int16 + saturate", True, epilogue(m, s, zp, table, mid="int16")),
            ("bug: zero point + 1", False, epilogue(m, s, zp + 1, table)),
        ][:per_k]
        lift = LiftSpec("acc", tuple(int(v) for v in w[:, 0]), 0, 0, "int8", 0)
        for name, eq, after in variants:
            ob = Obligation("epilogue", before, after, {"acc": (lo, hi)}, "bitwise", lift)
            out.append((f"K={k:<5} {name}", eq, ob))
    return out


def lowering_obligations() -> list[tuple[str, bool, Obligation]]:
    """Supplementary: ONNX float-scale requantization lowered to a fixed-point multiplier.

    Not part of the targets above; shows an equivalence (under bounded:1) whose SMT
    form is hard: the float staircase against double rounding, no shared subterm.
    """
    rng = np.random.default_rng(SEED + 1)
    out = []
    for k in (64, 512, 4096):
        w = rng.integers(-128, 128, size=(k, 1))
        lo, hi = accumulator_range(w, 0, INT8, 0).overall
        scale = float(np.float32(1.0 / (np.sqrt(k) * 96.0) * rng.uniform(0.8, 1.25)))
        m, s = quantize_multiplier(scale)
        acc = Var("acc")
        before = op("requant_float", acc, scale=scale, zp=3, out="int8")
        after = op("requant_double", acc, multiplier=m, shift=s, zp=3, out="int8")
        lift = LiftSpec("acc", tuple(int(v) for v in w[:, 0]), 0, 0, "int8", 0)
        ob = Obligation("lowering", before, after, {"acc": (lo, hi)}, "bounded:1", lift)
        out.append((f"K={k:<5} float scale -> fixed point (bounded:1)", True, ob))
    return out


class Clock:
    """Wall and CPU time of a block (every contender runs in this one process and thread)."""

    def __enter__(self):
        self.w0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.w0
        self.cpu = time.process_time() - self.c0


def time_z3_default(text: str, cap: float) -> tuple[Clock, str]:
    s = z3.Solver()
    s.set("timeout", int(cap * 1000))
    with Clock() as c:
        s.from_string(text)
        r = s.check()
    return c, "sat" if r == z3.sat else "unsat" if r == z3.unsat else "timeout"


def time_enum(ob: Obligation, cap: float) -> tuple[Clock, str]:
    with Clock() as c:
        d = penum.decide(ob, limit=1 << 40, deadline=time.perf_counter() + cap)
    return c, {"holds": "unsat", "violated": "sat"}.get(d.status, "timeout")


HDR = (
    f"{'obligation':<46} {'range':>10} {'ours':>9} {'(wall)':>9} {'verdict':>8} {'bzla':>9} "
    f"{'z3 default':>11} {'enum':>9} {'z3/ours':>9} {'enum/ours':>10}"
)


def _row(name: str, eq: bool, ob: Obligation, args) -> tuple[float, float, float] | None:
    """Time one obligation with every contender and print its row (None: wrong answer)."""
    lo, hi = ob.ranges["acc"]
    clocks = []
    for _ in range(3):  # ours is cheap: median of 3 runs (no store, so each one solves)
        with Clock() as ours_c:
            v = check(ob, timeout_s=10.0)
        clocks.append(ours_c)
    ours_c = sorted(clocks, key=lambda c: c.cpu)[1]
    ours = ours_c.cpu
    expect = "proven" if eq else "refuted"
    if v.status != expect:
        print(f"UNEXPECTED verdict {v.status} for {name} ({v.reason})")
        return None
    text = to_smtlib(ob)
    bz = run("bitwuzla", text.replace("(check-sat)\n", ""), ["acc"], Budget(args.z3_cap))
    z3c, z3r = time_z3_default(text, args.z3_cap)
    enc, enr = time_enum(ob, args.enum_cap)
    z3t, ent = z3c.cpu, enc.cpu
    if z3r == "timeout":
        z3t = max(z3t, args.z3_cap)
    if enr == "timeout":
        ent = max(ent, args.enum_cap)
    for who, r in (("z3", z3r), ("enum", enr), ("bitwuzla", bz.status)):
        if r in ("sat", "unsat") and (r == "unsat") != eq:
            print(f"DISAGREEMENT: {who} says {r} on {name}")
            return None
    bzs = f"{bz.time_ms / 1000:.2f}s" if bz.status != "unknown" else f">={args.z3_cap:.0f}s"
    z3s = f"{z3t:.2f}s" if z3r != "timeout" else f">={args.z3_cap:.0f}s"
    ens = f"{ent:.2f}s" if enr != "timeout" else f">={args.enum_cap:.0f}s"
    z3x = (">=" if z3r == "timeout" else "") + f"{z3t / ours:.0f}x"
    enx = (">=" if enr == "timeout" else "") + f"{ent / ours:.0f}x"
    print(
        f"{name:<46} {hi - lo + 1:>10} {ours * 1000:>7.1f}ms {ours_c.wall * 1000:>7.1f}ms {v.status:>8} {bzs:>9} "
        f"{z3s:>11} {ens:>9} {z3x:>9} {enx:>10}",
        flush=True,
    )
    return ours, z3t, ent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--z3-cap", type=float, default=30.0, help="Z3 default cap per obligation (s)")
    ap.add_argument(
        "--enum-cap", type=float, default=30.0, help="enumeration cap per obligation (s)"
    )
    ap.add_argument("--per-k", type=int, default=4, choices=(2, 4), help="obligations per K")
    ap.add_argument("--no-lowering", action="store_true", help="skip the supplementary rows")
    args = ap.parse_args()

    # Warm-up (imports, numpy first calls) on an obligation that is not in the table.
    warm = obligations(2)[0][2]
    check(warm.with_policy("bounded:1"))

    print(HDR)
    print("-" * len(HDR))
    rows = [_row(name, eq, ob, args) for name, eq, ob in obligations(args.per_k)]
    if any(r is None for r in rows):
        return 1
    ours_all = [r[0] for r in rows]
    med = statistics.median(ours_all)
    ratios_z3 = [r[1] / r[0] for r in rows]
    ratios_en = [r[2] / r[0] for r in rows]
    print("-" * len(HDR))
    print(f"epilogue obligations: {len(rows)}, all decided (none unknown) within the 10 s budget")
    print(f"ours (CPU): median {med * 1000:.1f} ms, max {max(ours_all) * 1000:.1f} ms")
    print(
        f"z3 default / ours: median {statistics.median(ratios_z3):.0f}x, "
        f"min {min(ratios_z3):.0f}x (timeouts counted at the cap)"
    )
    print(
        f"enumeration / ours: median {statistics.median(ratios_en):.0f}x, min {min(ratios_en):.0f}x"
    )
    if not args.no_lowering:
        print()
        print("supplementary (not in the targets): lowering obligations")
        low = [_row(name, eq, ob, args) for name, eq, ob in lowering_obligations()]
        if any(r is None for r in low):
            return 1

    ob = obligations(2)[1][2]
    with tempfile.TemporaryDirectory() as d:
        store = ProofStore(d, "rw")
        check(ob, store=store)
        times = []
        for _ in range(20):
            with Clock() as c:
                v = check(ob, store=store)
            times.append(c.cpu)
            assert v.cached
    print(
        f"cached answer (proof store hit, refutation replayed): CPU median {statistics.median(times) * 1000:.2f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
