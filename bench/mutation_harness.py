"""Mutation harness: does the prover kill every seeded postprocessing bug, and does random testing?

    python3 bench/mutation_harness.py [--timeout S] [--only NAME,...] [--json FILE]

For every mutant of `bench/mutants_catalog.py`:
- the prover's verdict under `bitwise` (`prover.api.check`, portfolio, with
  `cross_check=True`: a second procedure must agree), its time and the obligation hash;
  a refutation must carry a lifted input row that reproduces it through the matmul;
- ground truth by exhaustive enumeration of the accumulator range, evaluated here
  (numpy, independently of the prover's procedures);
- random testing: 1,000 and 100,000 seeded random input rows of the compute op pushed
  through the dot product (index maps: random index pairs), counting mismatches.

Prints the kill-rate table and exits 1 if a mutant that changes an output survives
the prover, an equivalent variant is refuted, a verdict disagrees with enumeration,
or the catalogue's label is wrong; 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mutants_catalog import BUG, EQUIVALENT, Mutant, catalog  # noqa: E402

from prover import terms as T  # noqa: E402
from prover.api import check  # noqa: E402
from prover.domain import NUMPY  # noqa: E402
from prover.lift import row_value  # noqa: E402
from prover.matmul import matmul_acc  # noqa: E402

RANDOM_SIZES = (1_000, 100_000)
RANDOM_SEED = 7
CHUNK = 1 << 20


@dataclass
class Row:
    """One mutant's results."""

    name: str
    category: str
    expect: str
    truth: str  # "bug" | "equivalent" by exhaustive enumeration
    differing: int  # number of assignments where before != after
    prover: str  # proven | refuted | unknown
    procedure: str
    cross_checked_by: str | None
    prover_ms: float
    obligation_hash: str
    witness: dict | None
    lifted: bool
    random_hits: dict  # n -> mismatching samples
    mistake: str

    @property
    def killed_by_prover(self) -> bool:
        return self.prover == "refuted"


def _outputs(m: Mutant, env: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(before, after) stacked per output, concretely, on a batch of assignments."""
    ob = m.obligation()
    n = len(next(iter(env.values())))
    with np.errstate(all="ignore"):
        b = [np.broadcast_to(T.evaluate(t, NUMPY, env), (n,)) for t in ob.outputs_before]
        a = [np.broadcast_to(T.evaluate(t, NUMPY, env), (n,)) for t in ob.outputs_after]
    return np.stack(b), np.stack(a)


def differs(m: Mutant, env: dict[str, np.ndarray]) -> np.ndarray:
    """Mask of the assignments where some output of `after` differs from `before`."""
    b, a = _outputs(m, env)
    return np.any(b != a, axis=0)


def enumerate_truth(m: Mutant) -> tuple[int, dict | None]:
    """(number of differing assignments, first one) over the whole domain."""
    names = list(m.ranges)
    los = [m.ranges[v][0] for v in names]
    sizes = [m.ranges[v][1] - m.ranges[v][0] + 1 for v in names]
    total = int(np.prod(sizes))
    count, first = 0, None
    for start in range(0, total, CHUNK):
        idx = np.arange(start, min(total, start + CHUNK), dtype=np.int64)
        env, rest = {}, idx
        for v, lo, sz in reversed(list(zip(names, los, sizes, strict=True))):
            env[v] = rest % sz + lo
            rest = rest // sz
        bad = differs(m, env)
        count += int(bad.sum())
        if first is None and bad.any():
            k = int(np.argmax(bad))
            first = {v: int(env[v][k]) for v in names}
    return count, first


def random_samples(m: Mutant, n: int, seed: int = RANDOM_SEED) -> dict[str, np.ndarray]:
    """n random assignments: input rows through the dot product, or uniform index values."""
    rng = np.random.default_rng(seed)
    if m.lift is not None:
        spec = m.lift
        rows = rng.integers(-128, 128, size=(n, len(spec.weights)), dtype=np.int64)
        w = np.asarray(spec.weights, dtype=np.int64).reshape(-1, 1)
        acc = matmul_acc(rows, w, spec.x_zp, spec.w_zp, np.array([spec.bias]))[:, 0]
        return {spec.var: acc}
    return {v: rng.integers(lo, hi + 1, size=n, dtype=np.int64) for v, (lo, hi) in m.ranges.items()}


def random_hits(m: Mutant, n: int) -> int:
    return int(differs(m, random_samples(m, n)).sum())


def run_one(m: Mutant, timeout_s: float) -> Row:
    ob = m.obligation()
    count, _ = enumerate_truth(m)
    t0 = time.perf_counter()
    v = check(ob, timeout_s=timeout_s, solver="auto", cross_check=True)
    ms = (time.perf_counter() - t0) * 1000
    witness, lifted = None, False
    if v.refuted:
        cx = v.counterexample
        witness = dict(cx.assignment)
        if m.lift is not None and cx.lifted_input is not None:
            acc = row_value(m.lift, cx.lifted_input)
            lifted = acc == witness[m.lift.var] and bool(
                differs(m, {m.lift.var: np.array([acc])})[0]
            )
    return Row(
        m.name,
        m.category,
        m.expect,
        BUG if count else EQUIVALENT,
        count,
        v.status,
        v.solver,
        v.details.get("cross_checked_by"),
        ms,
        ob.hash,
        witness,
        lifted,
        {n: random_hits(m, n) for n in RANDOM_SIZES},
        m.mistake,
    )


def problems(r: Row, m: Mutant) -> list[str]:
    """Everything wrong with one result (empty = as it should be)."""
    out = []
    if r.truth != r.expect:
        out.append(f"catalogue says {r.expect}, enumeration says {r.truth}")
    if r.truth == BUG and r.prover != "refuted":
        out.append(f"output-changing mutant survives the prover ({r.prover})")
    if r.truth == EQUIVALENT and r.prover != "proven":
        out.append(f"equivalent variant not proven ({r.prover})")
    if r.prover == "refuted" and m.lift is not None and not r.lifted:
        out.append("refutation did not lift to a reproducing input row")
    if r.prover == "refuted" and r.cross_checked_by is None:
        out.append("no second procedure cross-checked the refutation")
    return out


def _rate(k: int, n: int) -> str:
    return f"{k}/{n} ({100 * k / n:.0f}%)" if n else "-"


def render(rows: list[Row], seconds: float) -> str:
    """The per-mutant table, then the kill-rate summary."""
    lines = []
    hdr = f"{'mutant':32} {'category':14} {'truth':10} {'prover':9} {'by':18} {'ms':>8} {'rnd-1k':>7} {'rnd-100k':>8}  obligation"
    lines += [hdr, "-" * len(hdr)]
    for r in rows:
        by = r.procedure + ("+" + r.cross_checked_by if r.cross_checked_by else "")
        rk = ["kill" if r.random_hits[n] else "-" for n in RANDOM_SIZES]
        if r.truth == EQUIVALENT:
            rk = ["(eq)" if not r.random_hits[n] else "FP!" for n in RANDOM_SIZES]
        lines.append(
            f"{r.name:32} {r.category:14} {r.truth:10} {r.prover:9} {by:18} {r.prover_ms:8.1f} "
            f"{rk[0]:>7} {rk[1]:>8}  {r.obligation_hash[:16]}"
        )
    bugs = [r for r in rows if r.truth == BUG]
    eqs = [r for r in rows if r.truth == EQUIVALENT]
    nb = len(bugs)
    lines += [
        "",
        f"Kill rates over {nb} output-changing mutants (bitwise):",
        f"  {'prover':14} {_rate(sum(r.killed_by_prover for r in bugs), nb)}",
    ]
    for n in RANDOM_SIZES:
        lines.append(
            f"  {f'random-{n:,}':14} {_rate(sum(bool(r.random_hits[n]) for r in bugs), nb)}"
        )
    lines.append(
        f"Equivalent variants proven: {sum(r.prover == 'proven' for r in eqs)}/{len(eqs)} "
        "(each listed with verdict and obligation hash below)"
    )
    for r in eqs:
        lines.append(f"  {r.name:32} {r.prover:7} sha256 {r.obligation_hash}")
    lines.append(f"Total time {seconds:.1f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=30.0, help="prover budget per mutant (s)")
    ap.add_argument("--only", default="", help="comma-separated mutant names")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    ap.add_argument("--legend", action="store_true", help="also print each mutant's mistake")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    muts = list(catalog())
    if args.only:
        want = set(args.only.split(","))
        muts = [m for m in muts if m.name in want]
    rows, bad = [], []
    for m in muts:
        r = run_one(m, args.timeout)
        rows.append(r)
        bad += [f"{m.name}: {p}" for p in problems(r, m)]
    print(render(rows, time.perf_counter() - t0))
    if args.legend:
        print("\nMutants:")
        for r in rows:
            print(f"  {r.name:32} {r.mistake}")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    if bad:
        print("\nFAILED:", *bad, sep="\n  ")
        return 1
    print("\nOK: every output-changing mutant refuted, every equivalent variant proven.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
