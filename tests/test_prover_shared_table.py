"""The complete shared-table search (prover.shared_table): exact against brute force.

Brute force enumerates every (scheme, shift, multiplier, zero point) of a small int4 space
for each group, the partial table it reads (index -> reference value, over every
accumulator of the range) and then every combination of one partial table per group.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from prover import shared_table as ST
from prover import synthesis as S
from prover.api import check
from prover.domain import NUMPY
from prover.inttypes import INT32_MAX, int_type
from prover.lut import build_ort_sigmoid_table
from prover.terms import Var, evaluate, op

ACC = Var("acc")


def _before(scale, zp, mid, table):
    t = op("requant_float", ACC, scale=float(np.float32(scale)), zp=int(zp), out=mid)
    return op("lut", t, table=tuple(int(v) for v in table), in_type=mid, index_order="offset")


def _eval(term, accs):
    with np.errstate(all="ignore"):
        return np.asarray(evaluate(term, NUMPY, {"acc": np.asarray(accs, dtype=np.int64)}))


def _partials(before, lo, hi, space):
    """Every distinct partial table (tuple, -99 = not read) some choice makes right."""
    accs = np.arange(lo, hi + 1)
    ref = _eval(before, accs)
    mid = int_type(space.intermediate_type)
    ms = np.arange(0, space.multiplier_max + 1)
    out = set()
    for scheme in space.schemes:
        for shift in space.shifts(scheme):
            if scheme == "fixed_double" and (max(hi, -lo) << max(shift, 0)) > INT32_MAX:
                continue
            q = S._q(scheme, shift, accs[None, :], ms[:, None])
            ref_zp = dict(before.args[0].params)["zp"]
            zps = range(mid.min, mid.max + 1) if space.zero_point == "free" else [ref_zp]
            for zp in zps:
                idx = np.unique(np.clip(q + zp, mid.min, mid.max) - mid.min, axis=0)
                # idx is monotone in acc: a row reads one value per index iff equal
                # neighbouring indices never meet different reference values
                ok = np.all((idx[:, 1:] != idx[:, :-1]) | (ref[1:] == ref[:-1]), axis=1)
                for row in idx[ok]:
                    tab = np.full(mid.size, -99)
                    tab[row] = ref
                    out.add(tuple(tab.tolist()))
    return out


def _brute_shared(groups, space):
    parts = [_partials(b, lo, hi, space) for b, _, lo, hi in groups]
    for combo in itertools.product(*parts):
        if all(len({c[i] for c in combo if c[i] != -99}) <= 1 for i in range(len(combo[0]))):
            return True
    return False


def _case(seed, attempt=0):
    """Two or three int4 groups: the same monotone table at different scales and zero
    points (a bias shifts the reference), sometimes a different table."""
    rng = np.random.default_rng(500 + seed + 1000 * attempt)
    table = np.sort(rng.integers(-3, 4, size=16))
    space = S.FixedPointSpace(
        schemes=[("fixed_double",), ("fixed_single",)][seed % 2],
        shift_min=17,
        shift_max=21,
        multiplier_max=int(rng.integers(100, 250)),
        zero_point="fixed" if seed % 4 == 3 else "free",
        intermediate_type="int4",
    )
    groups = []
    for _ in range(2 + seed % 2):
        t = table if rng.random() < 0.6 else np.sort(rng.integers(-3, 4, size=16))
        scale = float(np.float32(rng.uniform(0.02, 0.08)))
        lo, hi = -int(rng.integers(20, 150)), int(rng.integers(20, 150))
        groups.append((_before(scale, int(rng.integers(-4, 4)), "int4", t), "acc", lo, hi))
    return groups, space


def _solvable_alone(groups, space):
    return all(S.synthesize(*g, space).status == "found" for g in groups)


def _shared_case(seed):
    """The first case of `seed` whose groups each have parameters alone (otherwise
    synthesize_shared answers without the shared search) and whose valid choices are all
    enumerated (an effective multiplier >= 1 is not: `decide` then says not_found, which
    brute force cannot confirm or refute)."""
    for attempt in range(50):
        groups, space = _case(seed, attempt)
        if _solvable_alone(groups, space) and ST.decide(groups, space).status != "not_found":
            return groups, space
    raise AssertionError(f"no case for seed {seed} has groups solvable alone")


# eight cases by default (about 0.5 s of brute force each), the rest under -m slow
@pytest.mark.parametrize(
    "seed", [s if s < 8 else pytest.param(s, marks=pytest.mark.slow) for s in range(32)]
)
def test_decide_exact_against_brute_force(seed):
    groups, space = _shared_case(seed)
    got = ST.decide(groups, space)
    assert got.status in ("found", "impossible")
    assert (got.status == "found") == _brute_shared(groups, space)
    accs_of = [np.arange(lo, hi + 1) for _, _, lo, hi in groups]
    if got.status == "found":
        assert len({p.table for p in got.params}) == 1
        for (b, _, _, _), p, accs in zip(groups, got.params, accs_of, strict=True):
            assert np.array_equal(_eval(p.term(ACC), accs), _eval(b, accs))
    else:
        sub = [groups[i] for i in got.minimal]
        assert not _brute_shared(sub, space)
        for i in range(len(sub)):  # minimal: every proper subset by one has a table
            rest = sub[:i] + sub[i + 1 :]
            assert not rest or _brute_shared(rest, space)
        assert ST.verify_minimal(groups, space, got.minimal)


def test_brute_force_sample_has_both_outcomes():
    seen = set()
    for seed in range(8):
        groups, space = _shared_case(seed)
        seen.add(ST.decide(groups, space).status)
    assert seen == {"found", "impossible"}


def test_witnesses_name_disagreeing_accumulators():
    """An impossible pair with few options: each option pair has an index both read where
    the named accumulators' reference outputs differ (checkable by hand)."""
    for seed in range(32):
        groups, space = _case(seed)
        if not _solvable_alone(groups, space):
            continue
        got = ST.decide(groups, space, witness_limit=10_000)
        if got.status == "impossible" and got.witnesses:
            break
    else:
        pytest.fail("no impossible pair with witnesses in the sample")
    a, b = (groups[i] for i in got.minimal)
    na, nb = (got.options[i] for i in got.minimal)
    assert len(got.witnesses) == na * nb
    mid = int_type(space.intermediate_type)
    for w in got.witnesses:
        for g, prm, acc, out in zip((a, b), w.params, w.accs, w.outputs, strict=True):
            scheme, shift, m, zp = prm
            e = op(S.SCHEMES[scheme], ACC, multiplier=m, shift=shift, zp=zp, out=mid.name)
            assert int(_eval(e, [acc])[0]) - mid.min == w.index
            assert int(_eval(g[0], [acc])[0]) == out
        assert w.outputs[0] != w.outputs[1]


def test_budget_gives_not_found_never_impossible():
    groups, space = _case(1)
    got = ST.decide(groups, space, budget_s=0.0)
    assert got.status == "not_found" and got.params is None and "budget" in got.note


def test_shared_sigmoid_table_found_and_proven():
    """Two int8 groups: one Sigmoid table, scales differing by a power of two; found
    parameters are proven by check."""
    sig = build_ort_sigmoid_table(0.05, 0, "int8", 1 / 256, -128, "int8", fused=True)
    groups = [(_before(s, 0, "int8", sig), "acc", -3000, 3000) for s in (0.0101, 0.0202)]
    space = S.FixedPointSpace(index_order="twos_complement")
    got = ST.decide(groups, space)
    assert got.status == "found", got.note
    for (b, v, lo, hi), p in zip(groups, got.params, strict=True):
        assert check(S.obligation(b, v, lo, hi, p)).status == "proven"


def test_synthesize_shared_falls_back_to_the_complete_search():
    """Where no candidate table fits, synthesize_shared answers with the exhaustive
    search: a shared table (seed 0: the candidates fail, the search finds one) or a
    proof (seed 3: impossible, the minimal groups named, no group impossible alone)."""
    groups, space = _case(0)
    got = ST.synthesize_shared(groups, space)
    assert got.status == "found" and got.complete is not None
    assert got.complete.status == "found" and len({p.table for p in got.params}) == 1
    groups, space = _case(3)
    got = ST.synthesize_shared(groups, space)
    assert got.status == "impossible" and got.params is None and not got.conflicts
    assert got.complete.minimal == (0, 1)


def test_size_budget_gives_not_found():
    """Too many partial tables for one group: the search stops, and says so."""
    groups = [(_before(0.05, 0, "int4", np.arange(-8, 8) // 4), "acc", -60, 60)] * 2
    space = S.FixedPointSpace(shift_min=17, shift_max=21, multiplier_max=200,
                              intermediate_type="int4")  # fmt: skip
    with pytest.raises(TimeoutError, match="partial tables"):
        ST.group_options(*groups[0], space, max_options=1)
    got = ST.decide(groups, space, max_options=1)
    assert got.status == "not_found" and "partial tables" in got.note
    assert ST.decide(groups, space).status == "found"
