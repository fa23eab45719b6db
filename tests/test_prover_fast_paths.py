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
from prover import terms as T
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
            got = segments._local_staircase(c, "acc", lo, hi, True, limit)[0]
        except Exception as e:  # the ends-first computation fails the same way
            results.append((c, lo, hi, limit, type(e)))
            continue
        assert np.array_equal(got, segments._local_staircase(c, "acc", lo, hi, False, limit)[0])
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
                segments._local_staircase(c, "acc", lo, hi, True, limit)[0]
        else:
            assert np.array_equal(segments._local_staircase(c, "acc", lo, hi, True, limit)[0], want)


def _random_point_term(rng: np.random.Generator, depth: int = 0) -> T.Term:
    """A random term over `acc` and `b` from the primitives `INT_POINT` may evaluate."""
    if depth > 3 or rng.random() < 0.15:
        return Var("acc") if rng.random() < 0.7 else Var("b")
    x = _random_point_term(rng, depth + 1)
    k = int(rng.integers(0, 9))
    if k == 0:
        return _random_chain_over(rng, x)
    if k == 1:
        tbl = tuple(int(v) for v in rng.integers(-(2**40), 2**40, size=256))
        order = ("offset", "twos_complement")[int(rng.integers(0, 2))]
        return op("lut", x, table=tbl, in_type="int8", index_order=order)
    if k == 2:
        return op(("add", "sub")[int(rng.integers(0, 2))], x, _random_point_term(rng, depth + 1))
    if k == 3:
        return op("add_const", x, c=int(rng.integers(-(2**40), 2**40)))
    if k == 4:
        return op("mul_const", x, c=int(rng.integers(-(2**20), 2**20)))
    if k == 5:
        lo = int(rng.integers(-(2**33), 2**33))
        return op("clip", x, lo=lo, hi=lo + int(rng.integers(0, 2**34)))
    if k == 6:
        return op(("saturate", "wrap")[int(rng.integers(0, 2))], x, type="int16")
    c = int(rng.integers(1, 2**20)) if rng.random() < 0.5 else 1 << int(rng.integers(0, 40))
    return op(("floordiv_const", "mod_const")[k - 7], x, c=c)


def _random_chain_over(rng: np.random.Generator, x: T.Term) -> T.Term:
    c = _random_chain(rng)
    ops = segments._chain_ops(c)
    t = x
    for o in ops:  # the same ops, applied to x instead of acc
        t = T.Op(o.prim, (t,), o.params)
    return t


def _replay_view(got: tuple) -> tuple:
    """What a replay reads of `evaluate_point`: both sides' definedness, and a side's
    values only where it is defined (elsewhere they mean nothing: `primitives`)."""
    b, a, ok_b, ok_a = got
    return (b if ok_b else None, a if ok_a else None, ok_b, ok_a)


def test_point_replay_in_python_ints_equals_one_element_arrays(monkeypatch):
    from prover import counterexample as cx
    from prover.bounds import fits_at

    rng = np.random.default_rng(8)
    cases = []
    for _ in range(400):
        b, a = _random_point_term(rng), _random_point_term(rng)
        ob = Obligation("other", b, a, {"acc": (-(2**62), 2**62), "b": (-(2**62), 2**62)})
        assert cx._point_prims(ob)
        for _ in range(4):
            mag = 1 << int(rng.integers(0, 63))
            pt = {"acc": int(rng.integers(-mag, mag)), "b": int(rng.integers(-mag, mag))}
            fit = fits_at(ob, pt)
            try:
                got = cx.evaluate_point(ob, pt)
            except Exception as e:
                cases.append((ob, pt, fit, type(e)))
            else:
                assert all(type(v) is int for v in got[0] + got[1])
                cases.append((ob, pt, fit, _replay_view(got)))
    monkeypatch.setattr(cx, "_point_prims", lambda ob: False)
    for ob, pt, _, want in cases:
        if isinstance(want, type):
            with pytest.raises(want):
                cx.evaluate_point(ob, pt)
        else:
            assert _replay_view(cx.evaluate_point(ob, pt)) == want, (ob, pt)
    done = [w for _, _, fit, w in cases if fit and not isinstance(w, type)]
    assert len(done) > 300  # most points took the Python-integer path
    assert sum(not (w[2] and w[3]) for w in done) > 50  # undefined sides among them
    assert sum(w[2] and w[3] for w in done) > 50


def test_a_point_beyond_the_int64_bound_replays_in_arrays(monkeypatch):
    """Where the bound fails, int64 wrap-around is what the arrays compute: the replay
    does not switch to exact integers there (check() reports such a witness unknown)."""
    from prover import counterexample as cx
    from prover.domain import INT_POINT

    t = op("mul_const", Var("acc"), c=1 << 40)
    ob = Obligation("other", t, t, {"acc": (-(2**30), 2**30)})
    seen = []
    real = T.evaluate
    monkeypatch.setattr(
        cx.T, "evaluate", lambda u, d, *a, **k: seen.append(d) or real(u, d, *a, **k)
    )
    with np.errstate(all="ignore"):
        big = cx.evaluate_point(ob, {"acc": 1 << 30})
    assert INT_POINT not in seen
    assert big[0] == (int(np.int64(1 << 30) * np.int64(1 << 40)),)  # wrapped, as arrays do
    seen.clear()
    assert cx.evaluate_point(ob, {"acc": 3}) == ((3 << 40,), (3 << 40,), True, True)
    assert seen == [INT_POINT, INT_POINT]


def test_obligations_with_other_primitives_replay_in_arrays():
    from prover import counterexample as cx

    d = op("dot", Var("x"), Var("y"), weights=(2, 3), x_zp=0, w_zp=0)
    ob = Obligation("other", d, op("add", Var("x"), Var("y")), {"x": (-9, 9), "y": (-9, 9)})
    assert not cx._point_prims(ob)
    assert cx.evaluate_point(ob, {"x": 2, "y": 5}) == ((19,), (7,), True, True)


def test_point_domain_operations_equal_the_array_ones():
    """On every int64 value below 2^63 in magnitude (what `fits_at` lets through), the
    Python-integer operations give the array ones' int64 results."""
    from prover.domain import INT_POINT

    rng = np.random.default_rng(9)
    top = 2**63 - 1
    edge = [-top, top, -1, 0, 1, -(2**31), 2**31 - 1, -(2**62), 2**62]
    xs = edge + [int(v) for v in rng.integers(-top, top, size=300, dtype=np.int64)]
    xs += [int(v) >> int(rng.integers(0, 63)) for v in xs[:200]]
    for x in xs:
        a1 = np.array([x], dtype=np.int64)
        for e in (0, 1, 5, 31, 62, 63):
            assert INT_POINT.tdiv_pow2(x, e) == NUMPY.tdiv_pow2(a1, e)[0]
            assert INT_POINT.shr(x, e) == NUMPY.shr(a1, e)[0]
        for m in (0, 1, 255, 2**31 - 1, 2**62 - 1):
            assert INT_POINT.band(x, m) == NUMPY.band(a1, m)[0]
        for c in (1, 3, 2**31 + 7):
            assert INT_POINT.floordiv(x, c) == NUMPY.floordiv(a1, c)[0]
        for c in (True, False):
            assert INT_POINT.where(c, x, 7) == NUMPY.where(np.array([c]), a1, np.int64(7))
            assert INT_POINT.land(x > 0, c) == NUMPY.land(a1 > 0, c)[0]
        assert INT_POINT.clamp(x, -128, 127) == NUMPY.clamp(a1, -128, 127)[0]
        assert INT_POINT.step_count(x, (-5, 0, 0, 9)) == NUMPY.step_count(a1, (-5, 0, 0, 9))[0]
    table = tuple(range(100, 356))
    for i in (0, 17, 255):
        assert INT_POINT.lut(table, i) == NUMPY.lut(table, np.array([i]))[0]
    for i in (-1, 256):
        with pytest.raises(KernelError):
            INT_POINT.lut(table, i)
        with pytest.raises(KernelError):
            NUMPY.lut(table, np.array([i]))


def test_table_arrays_are_the_tables_own_read_only_and_kept_per_object():
    from prover import domain

    a = tuple(range(-128, 128))
    b = tuple(v + 1 for v in a)
    ta, tb = domain.table_array(a), domain.table_array(b)
    assert np.array_equal(ta, np.asarray(a)) and np.array_equal(tb, np.asarray(b))
    assert ta.dtype == np.int64 and not ta.flags.writeable
    assert domain.table_array(a) is ta  # the same object: converted once
    assert domain.table_array(tuple(a)) is ta  # tuple(a) is a itself
    assert domain.table_array(tuple(list(a))) is not ta  # an equal new object: its own
    lst = list(a)
    assert domain.table_array(lst) is not domain.table_array(lst)  # a list is not kept
    big = tuple(range(domain.TABLE_CACHE_MAX + 1))
    assert domain.table_array(big) is not domain.table_array(big)
    for i in range(3 * domain._TABLES_MAX):  # bounded
        domain.table_array(tuple(range(i, i + 4)))
    assert len(domain._TABLES) <= domain._TABLES_MAX
    x = np.array([-128, 0, 127], dtype=np.int64)
    t = op("lut", Var("x"), table=b, in_type="int8", index_order="offset")
    assert T.evaluate(t, NUMPY, {"x": x}).tolist() == [-127, 1, 128]
