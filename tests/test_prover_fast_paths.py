"""Fast paths of a cold decision give exactly what the general code gives.

Each shortcut taken to make a cold `segments` decision cheaper (issue 25) is checked here
against the definition it replaces, on random inputs: `NumpyDomain.clamp` against
`Domain.clamp` (two `where`s), `staircase.first_at_least` returning the guesses when every
one is accepted, `segments.valid_interval`'s interval for a requantizer applied to the
variable itself, and the witness picked by the smallest `rank` (`tests/test_terms_memo.py`
checks the canonical texts built without the JSON encoder).
"""

from __future__ import annotations

import numpy as np
import pytest
from test_prover_closed_form import _random_chain, _random_range

from prover import segments
from prover.counterexample import rank
from prover.domain import NUMPY, Domain, KernelError
from prover.inttypes import INT32_MAX, INT32_MIN
from prover.obligation import Obligation
from prover.staircase import _bisect, _gallop, fast_clip, first_at_least
from prover.terms import Var, op


def test_numpy_clamp_equals_the_two_wheres():
    rng = np.random.default_rng(1)
    big = 1 << 62
    for _ in range(300):
        n = int(rng.integers(1, 40))
        x = rng.integers(-big, big, size=n, dtype=np.int64)
        if rng.random() < 0.5:
            x = x // (1 << int(rng.integers(0, 62)))
        lo, hi = sorted(int(v) for v in rng.integers(-(1 << 40), 1 << 40, size=2))
        if rng.random() < 0.2:
            lo, hi = hi, lo  # an empty range: both give hi
        if rng.random() < 0.3:
            lo, hi = -128, 127
        got = NUMPY.clamp(x, lo, hi)
        want = Domain.clamp(NUMPY, x, lo, hi)
        assert type(got) is type(want) and got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got, want)


@pytest.mark.parametrize(
    "x",
    [
        np.int64(300),
        np.array(5, dtype=np.int64),  # 0-d
        np.array([1, 300, -300], dtype=np.int32),
        np.array([0, 200, 255], dtype=np.uint8),
        np.array([np.nan, 3.7, -400.2]),
        7,
    ],
)
def test_numpy_clamp_other_inputs_take_the_shared_definition(x):
    with np.errstate(invalid="ignore"):
        got = NUMPY.clamp(x, -128, 127)
        want = Domain.clamp(NUMPY, x, -128, 127)
    assert type(got) is type(want)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    assert np.array_equal(got, want)


def _general_first_at_least(f, levels, lo, hi, guess):
    """`first_at_least` as it was before its all-accepted shortcut (the reference)."""
    levels = np.asarray(levels, dtype=np.int64)
    n = levels.size
    a = np.full(n, lo, dtype=np.int64)
    b = np.full(n, hi + 1, dtype=np.int64)
    g = fast_clip(np.asarray(guess, dtype=np.int64), lo, hi + 1)
    pts = fast_clip(np.concatenate([g - 1, g]), lo, hi)
    fv = np.asarray(f(pts), dtype=np.int64)
    below = (g == lo) | (fv[:n] < levels)
    above = (g == hi + 1) | (fv[n:] >= levels)
    hit = below & above
    a[hit] = b[hit] = g[hit]
    right, left = ~above, above & ~below
    a[right] = g[right] + 1
    b[left] = g[left] - 1
    _gallop(f, levels, a, b, g, right, left, lo, hi)
    _bisect(f, levels, a, b)
    return a


def test_first_at_least_accepted_guesses_equal_the_general_search():
    rng = np.random.default_rng(2)
    for _ in range(200):
        step = int(rng.integers(1, 1000))
        off = int(rng.integers(-(10**6), 10**6))

        def f(x, step=step, off=off):
            return (np.asarray(x, dtype=np.int64) - off) // step

        lo = int(rng.integers(-(10**7), 10**7))
        hi = lo + int(rng.integers(0, 10**7))
        levels = np.unique(rng.integers(f(lo) - 3, f(hi) + 4, size=int(rng.integers(1, 30))))
        want = _general_first_at_least(f, levels, lo, hi, levels * step + off)
        exact = first_at_least(f, levels, lo, hi, want)  # every guess accepted
        assert np.array_equal(exact, want)
        noisy = want + rng.integers(-2, 3, size=want.size) * (rng.random(want.size) < 0.3)
        assert np.array_equal(first_at_least(f, levels, lo, hi, noisy), want)
        assert np.array_equal(first_at_least(f, levels, lo, hi), want)


def test_valid_interval_of_a_requantizer_on_the_variable_equals_the_search():
    rng = np.random.default_rng(3)
    ranges = [(INT32_MIN, INT32_MAX), (-(1 << 40), 1 << 40), (5, 5), (INT32_MAX, INT32_MAX + 9)]
    for i in range(300):
        c = _random_chain(rng)
        lo, hi = ranges[i % 4] if i % 3 == 0 else _random_range(rng)
        want = segments.valid_interval(c, "acc", lo, hi, closed_form=False)
        assert segments.valid_interval(c, "acc", lo, hi) == want, (c, lo, hi)
    c = op("requant_double", Var("acc"), multiplier=1 << 30, shift=3, zp=0, out="int8")
    for lo, hi in ((1 << 40, 1 << 41), (-(1 << 41), -(1 << 40))):  # outside the interval
        assert segments.valid_interval(c, "acc", lo, hi) is None
        assert segments.valid_interval(c, "acc", lo, hi, closed_form=False) is None
    with pytest.raises(KernelError):  # an empty range fails as the search fails
        segments.valid_interval(c, "acc", 3, 2)


def test_witness_is_the_smallest_rank_among_the_violating_segments():
    table = tuple(int(v) for v in np.arange(-128, 128)[::-1])
    lut = {"table": table, "in_type": "int8", "index_order": "offset"}
    rng = np.random.default_rng(4)
    for _ in range(40):
        m = int(rng.integers(1 << 29, 1 << 31))
        s = int(rng.integers(-12, -4))
        acc = Var("acc")
        b = op("lut", op("requant_double", acc, multiplier=m, shift=s, zp=0, out="int8"), **lut)
        a = op("lut", op("requant_single", acc, multiplier=m, shift=s, zp=0, out="int8"), **lut)
        lo = int(rng.integers(-(10**6), 10**5))
        ob = Obligation("other", b, a, {"acc": (lo, lo + int(rng.integers(0, 10**6)))})
        d = segments.decide(ob)
        p = segments.pieces(ob)
        bad = p.assumed & (~p.defined | (p.before != p.after))
        if not bad.any():
            continue
        near = segments._nearest_zero(p.starts[bad], p.ends[bad])
        assert d.witness == {"acc": min((int(v) for v in near), key=rank)}


def test_steps_guessed_in_one_evaluation_equal_the_ends_first_computation(monkeypatch):
    rng = np.random.default_rng(7)
    results = []
    for i in range(300):
        c = _random_chain(rng)
        lo, hi = (INT32_MIN, INT32_MAX) if i % 2 else _random_range(rng)
        limit = segments.SHARED_LEVELS if i % 3 else segments.LEVEL_LIMIT
        try:
            got = segments._local_thresholds(c, "acc", lo, hi, True, limit)
        except Exception as e:  # the ends-first computation fails the same way
            results.append((c, lo, hi, limit, type(e)))
            continue
        assert np.array_equal(got, segments._local_thresholds(c, "acc", lo, hi, False, limit))
        results.append((c, lo, hi, limit, got))
    used = [
        segments._guessed_steps(c, "acc", *segments.valid_interval(c, "acc", lo, hi), b)
        for c, lo, hi, _, got in results
        if not isinstance(got, type) and got.size
        for b in [segments._chain_interval(c, segments.valid_interval(c, "acc", lo, hi))]
    ]
    assert sum(u is not None for u in used) > len(used) // 2  # the shortcut is the common case
    monkeypatch.setattr(segments, "_guessed_steps", lambda *a: None)
    for c, lo, hi, limit, want in results:
        if isinstance(want, type):
            with pytest.raises(want):
                segments._local_thresholds(c, "acc", lo, hi, True, limit)
        else:
            assert np.array_equal(segments._local_thresholds(c, "acc", lo, hi, True, limit), want)
