"""Benchmark: the prover's decision vs Bitwuzla, Z3's default tactic and exhaustive enumeration.

One command, one run, the same obligations and the same protocol for every contender:

    python3 bench/run_bench.py [--cap 30] [--reps 3] [--per-k 4] [--no-lowering]

Obligations: gemmlowp requantize (double rounding) + 256-entry Sigmoid LUT epilogues
over the exact accumulator range of one int8 x int8 weights column (seeded), for
K = 64, 512 and 4096. Per K, half are equivalent rewrites (LUT stored in two's
complement order with the table reordered; requantize to int16 then saturate to
int8) and half carry a seeded bug (single instead of double rounding: a one-step
rounding difference; output zero point off by one). Supplementary rows: ONNX's
float-scale requantization lowered to a fixed-point multiplier under bounded:1.

Protocol (every contender alike): --cold-reps cold runs (default 5; the first is the first
run in this process for that obligation, each later one ours on a newly built copy of it,
the prover's shared threshold cache cleared before each; the SMT solvers on a new solver,
as every run of theirs is), reported as their median, then --reps warm runs, reported as
their median. Times are CPU seconds of this process (every contender runs
in process, single-threaded; the machine is shared, so wall time would measure the
load). A run that hits the cap is a timeout, printed `t/o` and counted in a ratio only
as a lower bound (`>=`); a contender that timed out is not repeated.

Contenders:
- `ours`: `prover.api.check(ob, timeout_s=10)`, no store (portfolio: `segments`),
  including the replay of a counterexample and lifting it to an int8 input row;
- `enc`: producing the obligation's SMT-LIB2 text (`prover.smtlib.to_smtlib`), the cost
  every SMT contender pays before solving (shown separately; `+enc` ratios include it);
- `bzla`: one Bitwuzla query on that text (capped by CPU time);
- `z3`: Z3's default tactic (`z3.Solver()`) on that text (Z3 caps wall time only);
- `enum`: `prover.enumerate.decide` over the whole range (verdict, largest difference,
  simplest counterexample);
- `numpy`: a plain numpy loop: the kernel's terms on chunks of the range, both sides,
  the verdict and largest difference, no precondition or witness bookkeeping.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prover import enumerate as penum  # noqa: E402
from prover import segments  # noqa: E402
from prover import terms as T  # noqa: E402
from prover.api import check  # noqa: E402
from prover.domain import NUMPY  # noqa: E402
from prover.inttypes import INT8  # noqa: E402
from prover.lut import LutSpec, build_lut, reorder_table  # noqa: E402
from prover.matmul import accumulator_range  # noqa: E402
from prover.obligation import LiftSpec, Obligation  # noqa: E402
from prover.proofstore import ProofStore  # noqa: E402
from prover.requant import quantize_multiplier  # noqa: E402
from prover.smtlib import to_smtlib  # noqa: E402
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


TIMEOUT = "timeout"
CONTENDERS = ("ours", "enc", "bzla", "z3", "enum", "numpy")
BASELINES = ("bzla", "z3", "enum", "numpy")
TARGET_MS, TARGET_Z3, TARGET_BZLA, TARGET_SPREAD = 2.0, 100.0, 50.0, 10.0
TARGET_COLD_MS = 1.0  # issue 25: the cold run (thresholds computed), same ratios to Z3/Bitwuzla


@dataclass
class Timing:
    """One contender on one obligation: cold run, warm runs, answer ("sat"/"unsat"/TIMEOUT)."""

    cold_runs: list[float]
    warm: list[float] = field(default_factory=list)
    answer: str = ""
    wall_warm: list[float] = field(default_factory=list)

    warm_timeout: bool = False  # a warm run hit the cap (its time counts as a lower bound)

    @property
    def timeout(self) -> bool:
        return self.answer == TIMEOUT

    def bound(self, warm: bool) -> bool:
        """Whether the time picked is only a lower bound (a run stopped at the cap)."""
        return self.timeout or (warm and self.warm_timeout)

    @property
    def cold(self) -> float:
        """The median of the cold runs (one unless --cold-reps)."""
        return statistics.median(self.cold_runs)

    @property
    def warm_median(self) -> float:
        return statistics.median(self.warm) if self.warm else self.cold

    def text(self, warm: bool) -> str:
        if self.timeout or (warm and self.warm_timeout):
            return "t/o"
        t = self.warm_median if warm else self.cold
        return f"{t * 1000:.1f}ms" if t < 1 else f"{t:.2f}s"


def timed(fn: Callable[[], str], reps: int, cold: Callable[[], Callable[[], str]] | None = None,
          cold_reps: int = 1) -> Timing:  # fmt: skip
    """The protocol: `cold_reps` cold runs (each `cold()`'s function, made fresh: a new
    obligation, caches cleared; the first one `fn` itself), then `reps` warm runs of `fn`
    unless a cold one timed out."""
    w0, c0 = time.perf_counter(), time.process_time()
    answer = fn()
    t = Timing([time.process_time() - c0], answer=answer)
    t.wall_warm.append(time.perf_counter() - w0)
    if answer == TIMEOUT:
        return t
    makes = [cold] * (cold_reps - 1) if cold is not None else []
    for make in makes:
        fresh = make()
        c0 = time.process_time()
        again = fresh()
        t.cold_runs.append(time.process_time() - c0)
        if again != answer:
            raise SystemExit(f"a contender answered {answer} then {again} on the same obligation")
    t.wall_warm.clear()
    for _ in range(reps):
        w0, c0 = time.perf_counter(), time.process_time()
        again = fn()
        t.warm.append(time.process_time() - c0)
        t.wall_warm.append(time.perf_counter() - w0)
        if again == TIMEOUT:
            t.warm_timeout = True
        elif again != answer:
            raise SystemExit(f"a contender answered {answer} then {again} on the same obligation")
    return t


def run_ours(ob: Obligation) -> Callable[[], str]:
    def go() -> str:
        v = check(ob, timeout_s=10.0)
        if v.status == "unknown":
            return TIMEOUT
        return "unsat" if v.status == "proven" else "sat"

    return go


def run_bitwuzla(text: str, cap: float) -> str:
    """Bitwuzla on SMT-LIB2 text, stopped once this process has used `cap` CPU seconds."""
    import bitwuzla as bw

    tm = bw.TermManager()
    opts = bw.Options()
    parser = bw.Parser(tm, opts)
    start = time.process_time()
    parser.configure_terminator(lambda: time.process_time() - start > cap)
    parser.parse(text, True, False)
    r = parser.bitwuzla().check_sat()
    return {bw.Result.SAT: "sat", bw.Result.UNSAT: "unsat"}.get(r, TIMEOUT)


def run_z3(text: str, cap: float) -> str:
    import z3

    s = z3.Solver()
    s.set("timeout", int(cap * 1000))  # Z3 offers a wall-time limit only
    s.from_string(text)
    r = s.check()
    return "sat" if r == z3.sat else "unsat" if r == z3.unsat else TIMEOUT


def run_enum(ob: Obligation, cap: float) -> str:
    d = penum.decide(ob, limit=1 << 40, deadline=time.perf_counter() + cap)
    return {"holds": "unsat", "violated": "sat"}.get(d.status, TIMEOUT)


def plain_numpy(ob: Obligation, cap: float, chunk: int = 1 << 14) -> str:
    """The baseline loop: both sides on every chunk of the range, verdict and largest difference."""
    (var,) = ob.variables
    lo, hi = ob.ranges[var]
    deadline = time.process_time() + cap
    worst = 0
    with np.errstate(all="ignore"):
        for start in range(lo, hi + 1, chunk):
            if time.process_time() > deadline:
                return TIMEOUT
            x = np.arange(start, min(hi + 1, start + chunk), dtype=np.int64)
            b = T.evaluate(ob.outputs_before[0], NUMPY, {var: x}, strict=False)
            a = T.evaluate(ob.outputs_after[0], NUMPY, {var: x}, strict=False)
            worst = max(worst, int(np.abs(np.asarray(b) - np.asarray(a)).max()))
    return "sat" if worst > ob.policy.bound else "unsat"


def measure(
    ob: Obligation, eq: bool, args, rebuild: Callable[[], Obligation] | None = None
) -> dict[str, Timing]:
    """Every contender on `ob`, under the same protocol; stops on a wrong answer. With
    --cold-reps N, each contender's cold figure is the median of N cold runs: ours on a
    newly built copy of the obligation (`rebuild`) with the threshold cache cleared, the
    SMT solvers on a new solver (as every run of theirs is)."""
    cap, reps = args.cap, args.reps
    segments.clear_shared_steps()

    def fresh_ours() -> Callable[[], str]:
        segments.clear_shared_steps()
        return run_ours(rebuild() if rebuild is not None else ob)

    res = {"ours": timed(run_ours(ob), reps, fresh_ours, args.cold_reps)}
    res["enc"] = timed(lambda: (to_smtlib(ob), "")[1], reps)
    text = to_smtlib(ob)
    res["bzla"] = timed(lambda: run_bitwuzla(text, cap), reps, lambda: lambda: run_bitwuzla(text, cap),
                        args.cold_reps)  # fmt: skip
    res["z3"] = timed(lambda: run_z3(text, cap), reps, lambda: lambda: run_z3(text, cap),
                      args.cold_reps)  # fmt: skip
    res["enum"] = timed(lambda: run_enum(ob, cap), reps)
    res["numpy"] = timed(lambda: plain_numpy(ob, cap), reps)
    want = "unsat" if eq else "sat"
    for who in ("ours", *BASELINES):
        if res[who].answer not in (want, TIMEOUT):
            raise SystemExit(f"DISAGREEMENT: {who} answers {res[who].answer}, expected {want}")
    if res["ours"].timeout:
        raise SystemExit("the prover answered unknown")
    return res


def ratio(res: dict[str, Timing], who: str, warm: bool, enc: bool = False) -> tuple[float, bool]:
    """(their time / ours, lower bound only) on warm medians or cold runs."""
    pick = (lambda t: t.warm_median) if warm else (lambda t: t.cold)
    theirs = pick(res[who]) + (pick(res["enc"]) if enc else 0.0)
    return theirs / pick(res["ours"]), res[who].bound(warm)


def fmt_ratio(r: tuple[float, bool]) -> str:
    return (">=" if r[1] else "") + (f"{r[0]:.0f}x" if r[0] >= 10 else f"{r[0]:.1f}x")


HDR = (
    f"{'obligation':<44} {'range':>9} {'verdict':>8} {'run':>4} "
    + " ".join(f"{c:>8}" for c in CONTENDERS)
    + f" {'bzla/ours':>9} {'z3/ours':>8} {'enum/ours':>9} {'numpy/ours':>10}"
)


def print_rows(name: str, ob: Obligation, eq: bool, res: dict[str, Timing]) -> None:
    lo, hi = ob.ranges[ob.variables[0]]
    verdict = "proven" if eq else "refuted"
    for warm in (False, True):
        run = "warm" if warm else "cold"
        cells = " ".join(f"{res[c].text(warm):>8}" for c in CONTENDERS)
        rs = [fmt_ratio(ratio(res, b, warm)) for b in BASELINES]
        first = f"{name:<44} {hi - lo + 1:>9} {verdict:>8}" if not warm else " " * 63
        print(f"{first} {run:>4} {cells} {rs[0]:>9} {rs[1]:>8} {rs[2]:>9} {rs[3]:>10}", flush=True)


def summary_line(rows: list[dict[str, Timing]], who: str, warm: bool, enc: bool = False) -> str:
    rs = [ratio(r, who, warm, enc) for r in rows]
    vals = [v for v, _ in rs]
    med, lo = statistics.median(vals), min(vals)
    bound = any(b for _, b in rs)
    timeouts = sum(b for _, b in rs)
    note = f" ({timeouts} timeouts counted at the cap: lower bounds)" if bound else ""
    return f"median {med:.0f}x, min {lo:.0f}x{note}"


def summarise(rows: list[dict[str, Timing]]) -> None:
    for warm in (True, False):
        run = "warm (median of the repetitions)" if warm else "cold (median of the cold runs)"
        ours = [r["ours"].warm_median if warm else r["ours"].cold for r in rows]
        med = statistics.median(ours)
        print(f"\n{run}: ours median {med * 1000:.2f} ms CPU, max {max(ours) * 1000:.2f} ms "
              f"({max(ours) / med:.1f}x the median)")  # fmt: skip
        enc = [r["enc"].warm_median if warm else r["enc"].cold for r in rows]
        print(f"  SMT-LIB text generation: median {statistics.median(enc) * 1000:.1f} ms "
              f"(max {max(enc) * 1000:.1f} ms), paid before any SMT solver starts")  # fmt: skip
        for who, label in (("bzla", "Bitwuzla"), ("z3", "Z3 default"), ("enum", "enumerate"),
                           ("numpy", "plain numpy")):  # fmt: skip
            extra = ""
            if who in ("bzla", "z3"):
                extra = f"; with the encoding: {summary_line(rows, who, warm, enc=True)}"
            print(f"  {label:<12} / ours: {summary_line(rows, who, warm)}{extra}")
    ours = [r["ours"].warm_median for r in rows]
    med = statistics.median(ours)
    z3m = statistics.median(ratio(r, "z3", True)[0] for r in rows)
    bzm = statistics.median(ratio(r, "bzla", True)[0] for r in rows)
    en = statistics.median(ratio(r, "enum", True)[0] for r in rows)
    nu = statistics.median(ratio(r, "numpy", True)[0] for r in rows)
    print("\ntargets (issue 15, warm medians):")
    for text, ok in (
        (f"ours median <= {TARGET_MS:g} ms incl. replay and lifting: {med * 1000:.2f} ms",
         med * 1000 <= TARGET_MS),
        (f">= {TARGET_Z3:g}x Z3 default: {z3m:.0f}x", z3m >= TARGET_Z3),
        (f">= {TARGET_BZLA:g}x Bitwuzla: {bzm:.0f}x", bzm >= TARGET_BZLA),
        (f"no obligation slower than {TARGET_SPREAD:g}x the median: max "
         f"{max(ours) / med:.1f}x", max(ours) / med <= TARGET_SPREAD),
    ):  # fmt: skip
        print(f"  {'met ' if ok else 'MISSED'}  {text}")
    cold = statistics.median(r["ours"].cold for r in rows)
    z3c = statistics.median(ratio(r, "z3", False)[0] for r in rows)
    bzc = statistics.median(ratio(r, "bzla", False)[0] for r in rows)
    print("targets (issue 25, cold: median of --cold-reps cold runs, thresholds computed):")
    for text, ok in (
        (f"ours median <= {TARGET_COLD_MS:g} ms cold: {cold * 1000:.2f} ms",
         cold * 1000 <= TARGET_COLD_MS),
        (f">= {TARGET_Z3:g}x Z3 default, cold: {z3c:.0f}x", z3c >= TARGET_Z3),
        (f">= {TARGET_BZLA:g}x Bitwuzla, cold: {bzc:.0f}x", bzc >= TARGET_BZLA),
    ):  # fmt: skip
        print(f"  {'met ' if ok else 'MISSED'}  {text}")
    print(f"  (for reference: enumerate / ours {en:.0f}x, plain numpy / ours {nu:.0f}x, "
          f"enumerate / plain numpy {en / nu:.2f}x)")  # fmt: skip


def _nth(make: Callable[[], list[tuple[str, bool, Obligation]]], i: int) -> Obligation:
    """The i-th obligation of a newly built list (a cold run's own copy)."""
    return make()[i][2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cap", type=float, default=30.0, help="cap per run and contender (s)")
    ap.add_argument("--reps", type=int, default=3, help="warm runs after the cold one (median)")
    ap.add_argument("--cold-reps", type=int, default=5,
                    help="cold runs per contender (median; ours on a new copy, caches cleared)")  # fmt: skip
    ap.add_argument("--per-k", type=int, default=4, choices=(2, 4), help="obligations per K")
    ap.add_argument("--no-lowering", action="store_true", help="skip the supplementary rows")
    args = ap.parse_args()

    # Warm-up of the process (imports, numpy's and the solvers' first calls) on an
    # obligation that is not in the table, so "cold" means cold for that obligation only.
    warm = obligations(2)[0][2].with_policy("bounded:1")
    check(warm)
    wtext = to_smtlib(warm)
    run_bitwuzla(wtext, 5.0)
    run_z3(wtext, 5.0)

    print(HDR)
    print("-" * len(HDR))
    rows = []
    for i, (name, eq, ob) in enumerate(obligations(args.per_k)):
        res = measure(ob, eq, args, partial(_nth, partial(obligations, args.per_k), i))
        print_rows(name, ob, eq, res)
        rows.append(res)
    print("-" * len(HDR))
    print(f"epilogue obligations: {len(rows)}, all decided by the prover within its 10 s budget; "
          f"cap per contender run {args.cap:g} s; {args.reps} warm runs after the cold one")  # fmt: skip
    summarise(rows)
    if not args.no_lowering:
        print("\nsupplementary (not in the targets): lowering obligations")
        for i, (name, eq, ob) in enumerate(lowering_obligations()):
            print_rows(name, ob, eq, measure(ob, eq, args, partial(_nth, lowering_obligations, i)))

    ob = obligations(2)[1][2]
    with tempfile.TemporaryDirectory() as d:
        store = ProofStore(d, "rw")
        check(ob, store=store)
        times = []
        for _ in range(20):
            c0 = time.process_time()
            v = check(ob, store=store)
            times.append(time.process_time() - c0)
            assert v.cached
    print(f"\ncached answer (proof store hit, refutation replayed): CPU median "
          f"{statistics.median(times) * 1000:.2f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
