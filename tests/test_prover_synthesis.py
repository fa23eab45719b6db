"""Fixed-point parameter synthesis (prover.synthesis): exact, complete, and proven by check.

Completeness is tested against brute force over a whole (small) parameter space: every
multiplier, shift, zero point and rounding scheme, on small accumulator ranges with an
int4 intermediate type and random reference tables.
"""

from __future__ import annotations

import numpy as np
import pytest

from prover import shared_table
from prover import synthesis as S
from prover.api import check
from prover.domain import NUMPY, KernelError
from prover.inttypes import INT32_MAX, int_type
from prover.lut import build_ort_sigmoid_table
from prover.requant import quantize_multiplier
from prover.shared_table import _valid_intervals
from prover.terms import Var, evaluate, op, to_json

ACC = Var("acc")


def _before(scale, zp, mid, table, clip=None, index_order="offset"):
    t = op("requant_float", ACC, scale=float(np.float32(scale)), zp=int(zp), out=mid)
    if clip is not None:
        t = op("clip", t, lo=clip[0], hi=clip[1])
    return op("lut", t, table=tuple(int(v) for v in table), in_type=mid, index_order=index_order)


def _eval(term, accs):
    with np.errstate(all="ignore"):
        return np.asarray(evaluate(term, NUMPY, {"acc": np.asarray(accs, dtype=np.int64)}))


def _q_all(scheme, shift, ms, accs):
    """Q(acc; M) for every multiplier (rows) and accumulator (columns), via the kernel."""
    from prover import requant as rq

    x = np.asarray(accs, dtype=np.int64)[None, :]
    m = np.asarray(ms, dtype=np.int64)[:, None]
    if scheme == "fixed_double":
        left, right = max(shift, 0), max(-shift, 0)
        return rq.rdbpot(NUMPY, rq.srdhm(NUMPY, x << left, m), right)
    return NUMPY.shr(x * m + (1 << (30 - shift)), 31 - shift)


def _brute(before, lo, hi, space, prefix=None):
    """Does some (scheme, shift, M, zp) make a table exist?  With `prefix`: the weaker
    question the conflict answers (window over every change point, steps at `prefix`)."""
    accs = np.arange(lo, hi + 1)
    ref = _eval(before, accs)
    mid = int_type(space.intermediate_type)
    cps = accs[1:][ref[1:] != ref[:-1]]
    steps = cps if prefix is None else prefix
    ref_zp = dict(before.args[0].args[0].params if before.args[0].prim == "clip" else
                  before.args[0].params)["zp"]  # fmt: skip
    zps = range(mid.min, mid.max + 1) if space.zero_point == "free" else [ref_zp]
    ms = np.arange(0, space.multiplier_max + 1)
    for scheme in space.schemes:
        for shift in space.shifts(scheme):
            if scheme == "fixed_double" and (hi << max(shift, 0)) > INT32_MAX:
                continue
            q = _q_all(scheme, shift, ms, accs)
            for zp in zps:
                idx = np.clip(q + zp, mid.min, mid.max)
                if prefix is None:
                    # a table exists iff equal indices never meet different outputs
                    ok = np.all((idx[:, 1:] != idx[:, :-1]) | (ref[1:] == ref[:-1]), axis=1)
                else:
                    win = (idx[:, cps - lo] > mid.min) & (idx[:, cps - 1 - lo] < mid.max)
                    sep = q[:, steps - lo] > q[:, steps - 1 - lo]
                    ok = np.all(win, axis=1) & np.all(sep, axis=1)
                if ok.any():
                    return True
    return False


def _small_case(rng):
    mid = "int4"
    scale = float(np.float32(rng.uniform(0.01, 0.12)))
    zp = int(rng.integers(-4, 4))
    table = rng.integers(-3, 4, size=16)
    table = np.where(rng.random(16) < 0.4, np.roll(table, 1), table)
    if rng.random() < 0.3:  # every level distinct: the window of the int4 index binds
        table = np.arange(-8, 8)
    clip = (int(rng.integers(-8, -2)), int(rng.integers(2, 8))) if rng.random() < 0.3 else None
    lo = -int(rng.integers(20, 260))
    hi = int(rng.integers(20, 260))
    return _before(scale, zp, mid, table, clip), lo, hi


@pytest.mark.parametrize("seed", range(40))
def test_complete_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    before, lo, hi = _small_case(rng)
    schemes = [("fixed_double",), ("fixed_single",), ("fixed_double", "fixed_single")][seed % 3]
    space = S.FixedPointSpace(
        schemes=schemes,
        shift_min=16,
        shift_max=23,
        multiplier_max=int(rng.integers(40, 200)),
        zero_point="free" if seed % 2 else "fixed",
        intermediate_type="int4",
    )
    got = S.synthesize(before, "acc", lo, hi, space)
    assert (got.status == "found") == _brute(before, lo, hi, space)
    accs = np.arange(lo, hi + 1)
    if got.status == "found":
        p = got.params
        assert p.scheme in schemes and space.shift_min <= p.shift <= space.shift_max
        assert 0 <= p.multiplier <= space.multiplier_max
        assert np.array_equal(_eval(p.term(ACC), accs), _eval(before, accs))
    else:
        c = got.conflict
        ref = _eval(before, accs)
        cps = accs[1:][ref[1:] != ref[:-1]]
        order = cps[np.lexsort((cps, np.abs(cps)))]
        a, b = c.pair
        assert ref[a - lo] != ref[b - lo] and c.outputs == (ref[a - lo], ref[b - lo])
        if c.prefix:
            assert b == order[c.prefix - 1]
            assert not _brute(before, lo, hi, space, prefix=order[: c.prefix])
            assert _brute(before, lo, hi, space, prefix=order[: c.prefix - 1])


def test_brute_force_finds_both_outcomes():
    """The completeness sample is not vacuous: it has solvable and impossible cases."""
    seen = set()
    for seed in range(40):
        rng = np.random.default_rng(seed)
        before, lo, hi = _small_case(rng)
        space = S.FixedPointSpace(
            schemes=[("fixed_double",), ("fixed_single",), ("fixed_double", "fixed_single")][
                seed % 3
            ],
            shift_min=16,
            shift_max=23,
            multiplier_max=int(rng.integers(40, 200)),
            zero_point="free" if seed % 2 else "fixed",
            intermediate_type="int4",
        )
        seen.add(S.synthesize(before, "acc", lo, hi, space).status)
    assert seen == {"found", "impossible"}


def _sigmoid_site(seed, mid="int8"):
    rng = np.random.default_rng(seed)
    scale = float(np.float32(rng.uniform(2e-4, 2e-3)))
    t = int_type(mid)
    zp = int(rng.integers(t.min + 100, t.max - 100))
    table = build_ort_sigmoid_table(
        float(rng.uniform(0.03, 0.08)), zp, mid, 1 / 256, t.min, mid, fused=True
    )
    lo, hi = -int(rng.integers(40_000, 120_000)), int(rng.integers(40_000, 120_000))
    return _before(scale, zp, mid, table), lo, hi, scale


def _rounded(before, lo, hi, scale):
    """The rounding lowering with the best table for it (the reference's value per index)."""
    m, s = quantize_multiplier(scale)
    zp = dict(before.args[0].params)["zp"]
    accs = np.arange(lo, hi + 1)
    mid = op("requant_double", ACC, multiplier=m, shift=s, zp=zp, out="int8")
    idx, ref = _eval(mid, accs), _eval(before, accs)
    table = np.zeros(256, dtype=np.int64)
    table[idx + 128] = ref  # last writer wins: equals the reference iff rounding separates
    return op("lut", mid, table=tuple(int(v) for v in table), in_type="int8", index_order="offset")


def test_synthesis_fixes_a_refuted_rounding_and_check_proves_it():
    for seed in range(20):
        before, lo, hi, scale = _sigmoid_site(seed)
        ob_rounded = S.Obligation("epilogue", before, _rounded(before, lo, hi, scale),
                                  {"acc": (lo, hi)}, "bitwise")  # fmt: skip
        if check(ob_rounded).status == "refuted":
            break
    else:
        pytest.fail("no sampled sigmoid site refutes the rounded multiplier")
    params, after = S.propose(before, "acc", lo, hi)
    ob = S.obligation(before, "acc", lo, hi, params)
    v = check(ob)
    assert v.status == "proven", v.reason
    assert ob.after == after
    # the record's obligation (hence its hash) carries every synthesised parameter
    j = to_json(ob.outputs_after[0])
    text = str(j)
    for key, val in (("multiplier", params.multiplier), ("shift", params.shift)):
        assert f"'{key}', {val}" in text or f"'{key}': {val}" in text
    assert list(params.table) in [list(x) for x in _lists(j)]
    other = S.FixedEpilogue(**{**params.__dict__, "multiplier": params.multiplier + 1})
    assert S.obligation(before, "acc", lo, hi, other).hash != ob.hash


def _lists(j):
    if isinstance(j, list | tuple):
        if j and all(isinstance(v, int) for v in j):
            yield j
        for v in j:
            yield from _lists(v)
    elif isinstance(j, dict):
        for v in j.values():
            yield from _lists(v)


@pytest.mark.parametrize("mid,seed", [("int8", 3), ("uint8", 4), ("int8", 7)])
def test_found_parameters_are_proven(mid, seed):
    before, lo, hi, _ = _sigmoid_site(seed, mid)
    s = S.synthesize(before, "acc", lo, hi, S.FixedPointSpace(intermediate_type=mid))
    assert s.status == "found" and s.change_points > 50
    v = check(S.obligation(before, "acc", lo, hi, s.params))
    assert v.status == "proven", v.reason


def test_single_rounding_and_twos_complement_tables():
    before, lo, hi, _ = _sigmoid_site(11)
    space = S.FixedPointSpace(schemes=("fixed_single",), index_order="twos_complement")
    s = S.synthesize(before, "acc", lo, hi, space)
    assert s.params.scheme == "fixed_single" and s.params.index_order == "twos_complement"
    assert check(S.obligation(before, "acc", lo, hi, s.params)).status == "proven"


def test_left_shift_precondition_respected():
    """Scale 2: the natural shift is +2, but a reachable acc near 2^29 forbids a left shift
    of 2 (it would overflow int32), so synthesis must find another shift, which proves."""
    before = _before(2.0, 0, "int8", np.arange(-128, 128))
    small = S.synthesize(before, "acc", -200, 200)
    assert small.params.shift == 2
    lo, hi = -200, (1 << 29) + 7
    s = S.synthesize(before, "acc", lo, hi)
    assert s.status == "found" and s.params.shift <= 1
    assert check(S.obligation(before, "acc", lo, hi, s.params)).status == "proven"
    # the same parameters as the small range's fail on the large one (an NPU-side obligation)
    v = check(S.obligation(before, "acc", lo, hi, small.params))
    assert v.status == "refuted" and v.counterexample.undefined


def test_constant_reference_needs_no_search():
    before = _before(1e-3, 0, "int8", [5] * 256)
    s = S.synthesize(before, "acc", -1000, 1000)
    assert s.status == "found" and s.change_points == 0
    assert set(_eval(s.after(ACC), np.arange(-1000, 1001)).tolist()) == {5}


def test_impossible_space_reports_a_pair_and_after_raises():
    """An identity table at a scale no multiplier of a tiny space reproduces."""
    before = _before(0.37, 0, "int8", np.arange(-128, 128))
    space = S.FixedPointSpace(shift_min=0, shift_max=0, multiplier_max=3, zero_point="fixed")
    s = S.synthesize(before, "acc", -300, 300, space)
    assert s.status == "impossible" and s.params is None
    a, b = s.conflict.pair
    assert b == a + 1 and s.conflict.outputs[0] != s.conflict.outputs[1]
    assert "acc=" in s.conflict.message()
    with pytest.raises(KernelError):
        s.after(ACC)
    with pytest.raises(KernelError):
        S.propose(before, "acc", -300, 300, space)


def test_bad_inputs_are_kernel_errors():
    with pytest.raises(KernelError, match="requant_float"):
        S.synthesize(op("clip", ACC, lo=0, hi=3), "acc", 0, 10)
    twice = op("add", op("requant_float", ACC, scale=0.1, zp=0, out="int8"),
               op("requant_float", ACC, scale=0.2, zp=0, out="int8"))  # fmt: skip
    with pytest.raises(KernelError):
        S.synthesize(twice, "acc", 0, 10)
    with pytest.raises(KernelError, match="int32"):
        S.synthesize(_before(0.1, 0, "int8", [0] * 256), "acc", 0, 1 << 40)
    with pytest.raises(KernelError):
        S.FixedPointSpace(schemes=("float32",))
    with pytest.raises(KernelError):
        S.FixedPointSpace(intermediate_type="int16")


@pytest.mark.parametrize("enumerate_below", [0, S._ENUMERATE_BELOW])
# two random cases by default (in both modes), ten more (about 0.55 s of CPU each) under
# -m slow
@pytest.mark.parametrize(
    "seed", [s if s < 2 else pytest.param(s, marks=pytest.mark.slow) for s in range(12)]
)
def test_valid_multipliers_exact_per_shift(seed, enumerate_below, monkeypatch):
    """Per scheme and shift, the valid multipliers are exactly brute force's, in interval
    mode (enumeration switched off) and in enumeration mode."""
    monkeypatch.setattr(S, "_ENUMERATE_BELOW", enumerate_below)
    rng = np.random.default_rng(100 + seed)
    before, lo, hi = _small_case(rng)
    accs = np.arange(lo, hi + 1)
    ref = _eval(before, accs)
    cps = accs[1:][ref[1:] != ref[:-1]]
    if len(cps) == 0:
        return
    mid = int_type("int4")
    mmax = 600
    pts = cps[np.lexsort((cps, np.abs(cps)))]
    for scheme in ("fixed_double", "fixed_single"):
        for shift in (17, 19, 21):
            p = S._Problem(scheme, shift, lo, hi, pts, mid.min + 1 - mid.max, mid.max - mid.min,
                           mid.size - 3, (mid.min, mid.max), mid.min, mid.max, mmax, 0.0)  # fmt: skip
            got, _ = S._solve_shift(p)
            q = _q_all(scheme, shift, np.arange(mmax + 1), accs)
            want = []
            for m in range(mmax + 1):
                for zp in range(mid.min, mid.max + 1):
                    idx = np.clip(q[m] + zp, mid.min, mid.max)
                    if np.all((idx[1:] != idx[:-1]) | (ref[1:] == ref[:-1])):
                        want.append(m)
                        break
            assert sorted(got.tolist()) == want, (scheme, shift)
            # the shared-table search reads the same set, as intervals
            shared = [m for a, b in _valid_intervals(p) for m in range(a, b)]
            assert shared == want, (scheme, shift)


def test_proof_record_stores_the_synthesised_parameters(tmp_path):
    import json

    from prover.proofstore import ProofStore

    before, lo, hi, _ = _sigmoid_site(2)
    params, _ = S.propose(before, "acc", lo, hi)
    ob = S.obligation(before, "acc", lo, hi, params)
    store = ProofStore(tmp_path, "rw")
    assert check(ob, store=store).status == "proven"
    rec = json.loads(store.path(ob.hash).read_text())
    after = json.dumps(rec["obligation"]["after"])
    assert (
        f'"multiplier", {params.multiplier}' in after
        or f'"multiplier": {params.multiplier}' in after
    )
    assert rec["obligation_hash"] == ob.hash and rec["verdict"]["status"] == "proven"
    assert list(params.table) in list(_lists(rec["obligation"]["after"]))


# --- one table shared by several column groups -------------------------------------------


def _brute_table(before, lo, hi, space, logical):
    """Does some (scheme, shift, M, zp) make the fixed `logical` table (offset order) right?"""
    accs = np.arange(lo, hi + 1)
    ref = _eval(before, accs)
    mid = int_type(space.intermediate_type)
    ms = np.arange(0, space.multiplier_max + 1)
    for scheme in space.schemes:
        for shift in space.shifts(scheme):
            if scheme == "fixed_double" and (max(hi, -lo) << max(shift, 0)) > INT32_MAX:
                continue
            q = _q_all(scheme, shift, ms, accs)
            for zp in range(mid.min, mid.max + 1):
                idx = np.clip(q + zp, mid.min, mid.max) - mid.min
                if np.any(np.all(np.asarray(logical)[idx] == ref[None, :], axis=1)):
                    return True
    return False


def _fit_case(seed):
    """A monotone reference (every value one run of indices) and a candidate table: a
    synthesised one, the same with one run boundary moved, or a random monotone one."""
    rng = np.random.default_rng(100 + seed)
    scale = float(np.float32(rng.uniform(0.01, 0.12)))
    table = np.sort(rng.integers(-3, 4, size=16))
    before = _before(scale, int(rng.integers(-4, 4)), "int4", table)
    lo, hi = -int(rng.integers(20, 260)), int(rng.integers(20, 260))
    space = S.FixedPointSpace(
        schemes=[("fixed_double",), ("fixed_single",)][seed % 2],
        shift_min=16,
        shift_max=23,
        multiplier_max=int(rng.integers(40, 200)),
        intermediate_type="int4",
        index_order="offset",
    )
    own = S.synthesize(before, "acc", lo, hi, space)
    kind = seed % 3
    if kind == 2 or own.params is None:
        logical = np.sort(rng.integers(-3, 4, size=16))
    else:
        logical = np.array(own.params.table)
        if kind == 1:  # move one run boundary by one index
            steps = np.flatnonzero(np.diff(logical)) + 1
            if len(steps):
                i = int(rng.choice(steps))
                logical[i] = logical[i - 1] if rng.random() < 0.5 else logical[min(i + 1, 15)]
    return before, lo, hi, space, tuple(int(v) for v in logical)


@pytest.mark.parametrize("seed", range(30))
def test_fit_table_exact_against_brute_force(seed):
    """For a given table whose values each fill one run of indices, fit_table finds
    parameters iff some exist (brute force over the whole small space)."""
    before, lo, hi, space, logical = _fit_case(seed)
    got = S.fit_table(before, "acc", lo, hi, logical, space)
    assert (got is not None) == _brute_table(before, lo, hi, space, logical)
    if got is not None:
        accs = np.arange(lo, hi + 1)
        assert got.table == logical
        assert np.array_equal(_eval(got.term(ACC), accs), _eval(before, accs))


def test_fit_table_finds_both_outcomes():
    """The exactness sample above is not vacuous."""
    seen = {
        S.fit_table(b, "acc", lo, hi, t, sp) is None
        for b, lo, hi, sp, t in map(_fit_case, range(30))
    }
    assert seen == {True, False}


def test_shared_table_for_two_sigmoid_columns_is_proven():
    """Two per-channel columns (different scales), one Sigmoid table: synthesised
    parameters read one shared table and each group's obligation is proven."""
    sig = build_ort_sigmoid_table(0.05, 0, "int8", 1 / 256, -128, "int8", fused=True)
    groups = [(_before(scale, 0, "int8", sig), "acc", -3000, 3000) for scale in (0.0101, 0.0123)]
    space = S.FixedPointSpace(index_order="offset")
    got = shared_table.synthesize_shared(groups, space, tables=(tuple(int(v) for v in sig),))
    assert got.status == "found", got
    assert len({p.table for p in got.params}) == 1
    for (before, var, lo, hi), p in zip(groups, got.params, strict=True):
        assert check(S.obligation(before, var, lo, hi, p)).status == "proven"


def test_shared_table_impossible_when_a_group_alone_is():
    """A group with no parameters alone has none with a shared table: the pair is its own."""
    sig = build_ort_sigmoid_table(0.05, 0, "int8", 1 / 256, -128, "int8", fused=True)
    ok = (_before(0.0101, 0, "int8", sig), "acc", -3000, 3000)
    space = S.FixedPointSpace(multiplier_max=3, shift_min=0, shift_max=0, index_order="offset")
    alone = S.synthesize(*ok, space)
    assert alone.status == "impossible"
    got = shared_table.synthesize_shared([ok, ok], space)
    assert got.status == "impossible" and got.params is None
    assert got.conflicts[0].pair == alone.conflict.pair


def test_fit_table_rejects_a_table_of_the_wrong_size():
    sig = build_ort_sigmoid_table(0.05, 0, "int8", 1 / 256, -128, "int8", fused=True)
    with pytest.raises(KernelError, match="entries"):
        S.fit_table(_before(0.01, 0, "int8", sig), "acc", -10, 10, (0, 1, 2), S.FixedPointSpace())
