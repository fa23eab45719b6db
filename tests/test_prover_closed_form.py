"""Closed-form thresholds in `segments` (prover/stepinverse.py) against the binary search.

The closed forms are only guesses that `staircase.first_at_least` checks exactly, so the
verdicts cannot differ by construction; these tests pin that down on random and edge-case
requantizers (and show the guesses are in fact exact, so the speed-up is real), and that the
steps shared across columns equal the ones computed for each range alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from prover import segments
from prover import terms as T
from prover.domain import NUMPY, KernelError
from prover.inttypes import INT32_MAX, INT32_MIN, int_type
from prover.obligation import Obligation
from prover.staircase import first_at_least, monotone_thresholds
from prover.stepinverse import chain_guess
from prover.terms import Var, op

ROOT = Path(__file__).resolve().parent.parent
TYPES = ("int8", "uint8", "int16")


def _table(out: str, seed: int) -> tuple[int, ...]:
    t = int_type(out)
    rng = np.random.default_rng(seed)
    return tuple(int(v) for v in np.sort(rng.integers(-128, 128, size=t.size)))


def _random_chain(rng: np.random.Generator) -> T.Term:
    """One random monotone chain over `acc`: a requantizer, maybe wrapped or pre-shifted."""
    out = TYPES[int(rng.integers(0, len(TYPES)))]
    t = int_type(out)
    zp = int(rng.integers(t.min, t.max + 1))
    x: T.Term = Var("acc")
    if rng.random() < 0.2:
        x = op("add_const", x, c=int(rng.integers(-1000, 1000)))
    kind = int(rng.integers(0, 3))
    if kind == 0:
        scale = float(np.float32(10.0 ** rng.uniform(-10, 4)))
        if rng.random() < 0.3:  # exact ties: a power of two
            scale = float(2.0 ** int(rng.integers(-30, 3)))
        c = op("requant_float", x, scale=scale, zp=zp, out=out)
    else:
        m = int(rng.integers(0, 1 << 31))
        if rng.random() < 0.3:  # ties of the rounding shifts
            m = 1 << int(rng.integers(0, 31))
        prim = "requant_double" if kind == 1 else "requant_single"
        s = int(rng.integers(-31, 31 if kind == 1 else 30))
        c = op(prim, x, multiplier=m, shift=s, zp=zp, out=out)
    if rng.random() < 0.3:
        c = op("clip", c, lo=t.min + 3, hi=t.max - 5)
    if rng.random() < 0.2:
        c = op("saturate", op("add_const", c, c=int(rng.integers(-4, 5))), type=out)
    return c


def _random_range(rng: np.random.Generator) -> tuple[int, int]:
    r = rng.random()
    if r < 0.2:  # beyond int32: the valid interval clips it
        return -(1 << 33), 1 << 33
    span = int(10 ** rng.uniform(1, 9.5))
    lo = int(rng.integers(max(INT32_MIN, -span), max(INT32_MIN + 1, span)))
    return lo, min(lo + span, INT32_MAX)


def _same_decision(ob: Obligation) -> None:
    segments.clear_shared_steps()
    try:
        want = segments.decide(ob, closed_form=False)
    except Exception as e:  # the closed form must fail the same way
        with pytest.raises(type(e)):
            segments.decide(ob)
        return
    want_starts = segments._segments(ob, False)[1]
    for _ in range(2):  # cold, then served from the shared steps
        got = segments.decide(ob)
        assert (got.status, got.max_diff, got.witness) == (want.status, want.max_diff, want.witness)
        assert np.array_equal(segments._segments(ob)[1], want_starts)


def test_random_chains_give_identical_segments_verdicts_and_witnesses():
    rng = np.random.default_rng(15)
    for i in range(120):
        b, a = _random_chain(rng), _random_chain(rng)
        out_b = b.kwargs.get("out", b.kwargs.get("type"))
        lo, hi = _random_range(rng)
        ib = {"table": _table("int8", i), "in_type": "int8", "index_order": "offset"}
        # Two chains under the same table, or a chain against itself shifted by a step.
        before = op("lut", op("saturate", b, type="int8"), **ib)
        after = op("lut", op("saturate", a, type="int8"), **ib)
        if i % 3 == 0:
            after = op("saturate", op("add_const", b, c=1), type=out_b or "int8")
            before = b
        ob = Obligation("other", before, after, {"acc": (lo, hi)}, "bounded:1")
        _same_decision(ob)


@pytest.mark.parametrize("out", [*TYPES[:2], pytest.param(TYPES[2], marks=pytest.mark.slow)])
def test_guesses_are_exact_thresholds_on_edge_scales(out):
    """Huge, tiny, power-of-two and float32-boundary scales; every guess is the threshold."""
    t = int_type(out)
    scales = [1e-9, 2.0**-31, 2.0**-24, 1 / 3, 0.5, 1.0, 3.0, 1e4, 1e30, 6.0e-8]
    scales += [float(np.nextafter(np.float32(s), np.float32(1))) for s in (0.5, 2.0**-20)]
    for scale in scales:
        for zp in (t.min, 0 if t.min < 0 else 1, t.max):
            c = op("requant_float", Var("acc"), scale=scale, zp=zp, out=out)
            _assert_guesses_exact(c)
    for m in (0, 1, 1 << 30, (1 << 31) - 1, 1518500250):
        for s in (-31, -11, -1, 0, 3, 30):
            for prim in ("requant_double", "requant_single"):
                c = op(prim, Var("acc"), multiplier=m, shift=min(s, 30), zp=t.max // 2, out=out)
                _assert_guesses_exact(c)


def _assert_guesses_exact(c: T.Term) -> None:
    iv = segments.valid_interval(c, "acc", INT32_MIN, INT32_MAX, closed_form=False)
    if iv is None:
        return
    va, vb = iv

    def f(x):
        with np.errstate(over="ignore"):  # float32 products of huge scales saturate via inf
            return T.evaluate(c, NUMPY, {"acc": x})

    e = np.asarray(f(np.array([va, vb], dtype=np.int64)))
    levels = np.arange(int(e[0]) + 1, int(e[1]) + 1, dtype=np.int64)
    want = monotone_thresholds(f, int(e[0]), int(e[1]), va, vb)
    guess = chain_guess(segments._chain_ops(c), levels)
    assert guess is not None
    assert np.array_equal(np.clip(guess, va, vb + 1), want), c
    assert np.array_equal(first_at_least(f, levels, va, vb, guess), want)


def test_wrong_guesses_are_corrected_exactly():
    """The check, not the formula, decides: arbitrary guesses still give the thresholds."""
    rng = np.random.default_rng(3)
    c = op("requant_float", Var("acc"), scale=0.00037, zp=-5, out="int8")

    def f(x):
        return T.evaluate(c, NUMPY, {"acc": x})

    want = monotone_thresholds(f, -128, 127, -(10**6), 10**6)
    levels = np.arange(-127, 128, dtype=np.int64)
    for guess in (want - 1, want + 1, rng.integers(-(10**7), 10**7, size=levels.size)):
        got = first_at_least(f, levels, -(10**6), 10**6, guess)
        assert np.array_equal(got, want)


def test_shared_steps_equal_the_steps_of_each_range():
    c = op("requant_double", Var("acc"), multiplier=1690499072, shift=-9, zp=3, out="int8")
    segments.clear_shared_steps()
    rng = np.random.default_rng(7)
    for _ in range(30):
        lo = int(rng.integers(-(10**6), 10**6))
        hi = lo + int(rng.integers(0, 10**6))
        local = segments._local_staircase(c, "acc", lo, hi)[0]
        shared = segments._thresholds(c, "acc", lo, hi)
        assert np.array_equal(np.sort(local), np.sort(shared))
    assert segments._shared_steps.cache_info().hits >= 29


def test_nonpositive_scale_is_rejected_the_same_way():
    for scale in (-0.5, 0.0):
        before = op("requant_float", Var("acc"), scale=0.5, zp=0, out="int8")
        with pytest.raises(KernelError):
            after = op("requant_float", Var("acc"), scale=scale, zp=0, out="int8")
            ob = Obligation("other", before, after, {"acc": (-100, 100)}, "bitwise")
            segments.decide(ob)


def test_benchmark_obligations_decide_identically():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import run_bench
    finally:
        sys.path.remove(str(ROOT / "bench"))
    obs = [o for _, _, o in run_bench.obligations(4)] + [
        o for _, _, o in run_bench.lowering_obligations()
    ]
    assert len(obs) == 15
    for ob in obs:
        _same_decision(ob)


def _per_channel(rng: np.random.Generator, n: int, out: str = "int8") -> list[Obligation]:
    t = int_type(out)
    table = _table("int8", 5)
    lut = {"table": table, "in_type": "int8", "index_order": "offset"}
    obs = []
    for i in range(n):
        scale = float(np.float32(10.0 ** rng.uniform(-9, 3)))
        if i % 7 == 0:
            scale = 2.0 ** int(rng.integers(-20, 2))  # exact ties
        zp = int(rng.integers(t.min, t.max + 1))
        rq = op("requant_float", Var("acc"), scale=scale, zp=zp, out=out)
        before = op("lut", op("saturate", rq, type="int8"), **lut)
        after = op("lut", op("clip", rq, lo=-100, hi=100), **lut)
        lo = int(rng.integers(INT32_MIN, 0))
        hi = int(rng.integers(0, INT32_MAX))
        obs.append(Obligation("epilogue", before, after, {"acc": (lo, hi)}, "bounded:1"))
    return obs


def test_prefetched_steps_equal_the_steps_computed_alone():
    rng = np.random.default_rng(16)
    obs = _per_channel(rng, 300) + _per_channel(rng, 20, out="uint8")
    segments.clear_shared_steps()
    want = [segments.decide(o) for o in obs]
    alone = {
        k: segments._shared_steps(*k)
        for o in obs
        for side in (o.before, o.after)
        for k in [(c, "acc") for c in segments.cuts(side) if isinstance(c, T.Op)]
    }
    segments.clear_shared_steps()
    assert segments.prefetch(obs) == len(alone)
    for k, (va, vb, steps, base) in segments._PREFETCHED.items():
        a = alone[k]
        assert a is not None and (va, vb, base) == (a[0], a[1], a[3])
        assert np.array_equal(steps, a[2])
    got = [segments.decide(o) for o in obs]
    assert [(d.status, d.max_diff, d.witness) for d in got] == [
        (d.status, d.max_diff, d.witness) for d in want
    ]
    assert any(d.status == "violated" for d in got) and any(d.status == "holds" for d in got)


def test_prefetch_leaves_out_what_it_cannot_share():
    """int16 outputs (too many levels), invalid scales and zero points: decided alone, as before."""
    segments.clear_shared_steps()
    rng = np.random.default_rng(1)
    wide = _per_channel(rng, 3, out="int16")
    acc = Var("acc")
    bad = Obligation(
        "lowering",
        op("requant_float", acc, scale=0.5, zp=0, out="int8"),
        op("requant_float", acc, scale=-0.5, zp=0, out="int8"),
        {"acc": (-10, 10)},
        "bitwise",
    )
    assert segments.prefetch([*wide, bad]) == 1  # only the valid int8 chain of `bad`
    with pytest.raises(KernelError):
        segments.decide(bad)
    for o in wide:
        assert segments.decide(o).status in ("holds", "violated")


def test_prefetch_caches_no_chain_whose_guessed_threshold_is_wrong(monkeypatch):
    """The per-level check `f(t-1) < q <= f(t)` is what makes prefetching sound: with every
    closed-form guess one too high (or too low) no chain is cached, and the verdicts are
    those computed alone."""
    rng = np.random.default_rng(5)
    obs = _per_channel(rng, 40)
    segments.clear_shared_steps()
    want = [(d.status, d.max_diff, d.witness) for d in map(segments.decide, obs)]
    real = segments.inv_float_scale
    for off in (1, -1):
        monkeypatch.setattr(segments, "inv_float_scale", lambda q, s, o=off: real(q, s) + o)
        segments.clear_shared_steps()
        assert segments.prefetch(obs) == 0 and not segments._PREFETCHED
        got = [(d.status, d.max_diff, d.witness) for d in map(segments.decide, obs)]
        assert got == want
    monkeypatch.setattr(segments, "inv_float_scale", real)
    segments.clear_shared_steps()
    assert segments.prefetch(obs) == len(segments._PREFETCHED) > 0
    segments.clear_shared_steps()


def test_cut_values_read_from_the_steps_equal_the_evaluated_ones():
    """The decision reads each chain's values and preconditions at the segment starts from
    its staircase (`segments._cut_values`) instead of evaluating the chain: on random chains
    (inner add_const and clips included) and random ranges, they equal the evaluation's
    wherever the chain's preconditions hold, the preconditions equal its own everywhere,
    and so do the block's (assumed, defined, diff)."""
    from prover.enumerate import evaluate_block
    from prover.errors import NotApplicable

    rng = np.random.default_rng(17)
    seeded = outside = 0
    for i in range(150):
        b, a = _random_chain(rng), _random_chain(rng)
        lo, hi = _random_range(rng)
        if i % 4 == 0:  # a range inside int32 reaching past a chain's valid interval
            lo, hi = INT32_MIN, int(rng.integers(0, INT32_MAX))
        ib = {"table": _table("int8", i), "in_type": "int8", "index_order": "offset"}
        before = op("lut", op("saturate", b, type="int8"), **ib)
        after = op("lut", op("saturate", a, type="int8"), **ib)
        ob = Obligation("other", before, after, {"acc": (lo, hi)}, "bounded:1")
        segments.clear_shared_steps()
        try:
            var, starts, _, cs = segments._segments(ob)
        except (NotApplicable, KernelError):
            continue
        known = segments._cut_values(cs, var, lo, hi, starts)
        seeded += len(known)
        pts = np.concatenate([starts, rng.integers(lo, hi, size=64, endpoint=True)])
        for c, (vals, ok) in segments._cut_values(cs, var, lo, hi, pts).items():
            pre: list = []
            with np.errstate(all="ignore"):
                want = np.broadcast_to(T.evaluate(c, NUMPY, {var: pts}, pre), pts.shape)
            want_ok = np.logical_and.reduce([np.broadcast_to(p, pts.shape) for p in pre])
            assert np.array_equal(ok, want_ok), c
            assert np.array_equal(vals[ok], want[ok]), c
            outside += int((~ok).sum())
        got = evaluate_block(ob, {var: starts}, starts.size, known)
        want_b = evaluate_block(ob, {var: starts}, starts.size)
        assert np.array_equal(got[0], want_b[0]) and np.array_equal(got[1], want_b[1])
        both = got[0] & got[1]
        assert np.array_equal(got[2][both], want_b[2][both])
    assert seeded > 150 and outside > 0
