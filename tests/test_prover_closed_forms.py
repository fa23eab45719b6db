"""Obligations decided without a search: index maps in closed form (`prover.digits`: every
rule exact, never a false "equal") and sides that are the same terms (`prover.reflexive`)."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from prover import digits, reflexive
from prover import terms as T
from prover.api import check
from prover.domain import NUMPY
from prover.errors import NotApplicable, VacuousObligation
from prover.obligation import Obligation
from prover.policy import Policy
from prover.terms import Const, Var, op
from prover.verdict import Status


def _coords(flat: T.Term, shape: tuple[int, ...]) -> list[T.Term]:
    strides = [int(np.prod(shape[k + 1 :])) for k in range(len(shape))]
    return [
        op("mod_const", op("floordiv_const", flat, c=s), c=d)
        for s, d in zip(strides, shape, strict=True)
    ]


def _gather(out: tuple[int, ...], strides: tuple[int, ...], offset: int = 0) -> T.Term:
    acc: T.Term = Const(offset)
    for c, s in zip(_coords(Var("f"), out), strides, strict=True):
        acc = op("add", acc, op("mul_const", c, c=s))
    return acc


def _transpose_ob(shape, perm, strides, offset=0) -> Obligation:
    """A Transpose's source coordinates of output element `f` against those of the
    element a strided gather reads (as `compiler.ir.layout.move_terms` states them)."""
    out = tuple(shape[i] for i in perm)
    oc = _coords(Var("f"), out)
    inv = dict(zip(perm, oc, strict=True))
    before = tuple(inv[k] for k in range(len(shape)))
    after = tuple(_coords(_gather(out, strides, offset), shape))
    n = int(np.prod(shape))
    return Obligation("index_map", before, after, {"f": (0, n - 1)}, Policy(0))


def _right_strides(shape, perm) -> tuple[int, ...]:
    src = [int(np.prod(shape[k + 1 :])) for k in range(len(shape))]
    return tuple(src[i] for i in perm)


def _equal_everywhere(ob: Obligation) -> bool:
    n = ob.ranges["f"][1] + 1
    f = np.arange(n, dtype=np.int64)

    def ev(ts):
        return [np.broadcast_to(np.asarray(T.evaluate(t, NUMPY, {"f": f})), (n,)) for t in ts]

    return all(
        np.array_equal(b, a)
        for b, a in zip(ev(ob.outputs_before), ev(ob.outputs_after), strict=True)
    )


def _form_values(form, f: np.ndarray) -> np.ndarray:
    out = np.full(f.shape, form.const, dtype=np.int64)
    for (a, b), c in form.terms.items():
        d = f // a
        out += c * (d if b is None else d % b)
    return out


def test_every_closed_form_equals_its_term_on_the_whole_range():
    """Random terms of the index-map primitives (negative multipliers and constants too):
    wherever a closed form is given, it has the term's value at every point."""
    rng = random.Random(20261206)

    def term(depth: int) -> T.Term:
        if depth == 0 or rng.random() < 0.2:
            return Var("f") if rng.random() < 0.8 else Const(rng.randint(-3, 12))
        x, k = term(depth - 1), rng.random()
        if k < 0.3:
            return op("floordiv_const", x, c=rng.choice([1, 2, 3, 4, 6, 8, 12, 16]))
        if k < 0.6:
            return op("mod_const", x, c=rng.choice([1, 2, 3, 4, 6, 8, 12, 16]))
        if k < 0.8:
            return op("mul_const", x, c=rng.choice([-2, -1, 1, 2, 3, 4, 6, 8]))
        return op("add", x, term(depth - 1))

    formed = 0
    for _ in range(3000):
        t, n = term(rng.randint(1, 6)), rng.choice([1, 2, 5, 8, 12, 24, 64, 96, 200])
        f = np.arange(n, dtype=np.int64)
        try:
            form = digits.form_of(t, "f", n)
        except NotApplicable:
            continue
        formed += 1
        want = np.broadcast_to(np.asarray(T.evaluate(t, NUMPY, {"f": f})), (n,))
        assert np.array_equal(_form_values(form, f), want), (t, n)
    assert formed > 2000  # the rules cover most of these terms


def test_every_transpose_gather_of_rank_up_to_4_is_equal_in_closed_form():
    for shape in [(2, 3), (1, 3, 4), (2, 1, 3), (1, 3, 8, 8), (2, 3, 4, 5), (1, 1, 4, 6)]:
        for perm in itertools.permutations(range(len(shape))):
            ob = _transpose_ob(shape, perm, _right_strides(shape, perm))
            assert digits.same_index_maps(ob), (shape, perm)


def test_a_wrong_gather_is_never_called_equal():
    """Wrong strides, a stray offset, swapped strides: random gathers against their
    Transpose; the closed form says "equal" only where every point agrees."""
    rng = random.Random(7)
    claimed = wrong = 0
    for _ in range(600):
        r = rng.randint(1, 4)
        shape = tuple(rng.choice([1, 2, 3, 4, 5, 8]) for _ in range(r))
        perm = tuple(rng.sample(range(r), r))
        strides = list(_right_strides(shape, perm))
        if rng.random() < 0.6:
            j = rng.randrange(r)
            strides[j] += rng.choice([-1, 1, 2])
        if rng.random() < 0.3 and r > 1:
            i, j = rng.sample(range(r), 2)
            strides[i], strides[j] = strides[j], strides[i]
        offset = 0 if rng.random() < 0.8 else rng.randint(1, 3)
        ob = _transpose_ob(shape, perm, tuple(strides), offset)
        truth = _equal_everywhere(ob)
        wrong += not truth
        if digits.same_index_maps(ob):
            claimed += 1
            assert truth, (shape, perm, strides, offset)
    assert wrong > 150 and claimed > 150  # both kinds were drawn


def test_a_reshape_gather_recomposes_the_flat_index():
    """A row-major gather of another shape of the same size: the digits of the output
    index recompose to `f`, then split into the source's coordinates."""
    src, out = (2, 3, 4, 5), (6, 20)
    before = tuple(_coords(Var("f"), src))
    after = tuple(_coords(_gather(out, (20, 1)), src))
    ob = Obligation("index_map", before, after, {"f": (0, 119)}, Policy(0))
    assert digits.same_index_maps(ob) and _equal_everywhere(ob)


def test_only_one_variable_from_zero_has_a_closed_form():
    f = Var("f")
    ob = Obligation("index_map", (f,), (f,), {"f": (1, 9)}, Policy(0))
    assert not digits.same_index_maps(ob)
    g = Obligation("index_map", (op("add", f, Var("g")),), (op("add", Var("g"), f),),
                   {"f": (0, 3), "g": (0, 3)}, Policy(0))  # fmt: skip
    assert not digits.same_index_maps(g)


@pytest.mark.parametrize("right", [True, False])
def test_the_prover_decides_index_maps_by_closed_form_and_refutes_wrong_ones(right):
    """`check`: a right gather is proven without the search (its decision says so); a
    wrong one is not taken as proven by the closed form but refuted by the search, with a
    counterexample that replays."""
    shape, perm = (1, 3, 8, 8), (0, 2, 3, 1)
    strides = list(_right_strides(shape, perm))
    if not right:
        strides[3] += 1
    v = check(_transpose_ob(shape, perm, tuple(strides)))
    procs = v.details["procedures"]
    if right:
        assert v.status == Status.PROVEN and v.max_diff == 0
        assert procs[0]["name"] == "segments" and procs[0].get("closed_form") == "digits"
    else:
        assert v.status == Status.REFUTED and "closed_form" not in procs[0]
        assert v.counterexample is not None


def test_other_obligations_are_not_decided_by_closed_form():
    f = Var("f")
    before = (op("mod_const", op("floordiv_const", f, c=4), c=2),)
    after = (op("floordiv_const", op("mod_const", f, c=8), c=4),)  # equal, not the same
    index_map = Obligation("index_map", before, after, {"f": (0, 15)}, Policy(0))
    assert digits.same_index_maps(index_map)
    ob = Obligation("lowering", before, after, {"f": (0, 15)}, Policy(0))
    v = check(ob)
    assert v.status == Status.PROVEN and "closed_form" not in v.details["procedures"][0]


def _shifted(acc: T.Term) -> T.Term:
    """A requantizer with a left shift: its input must keep acc * 2 within int32."""
    return op("requant_double", acc, multiplier=1 << 30, shift=1, zp=0, out="int8")


def test_identical_sides_hold_without_a_search():
    f = Var("f")
    ob = Obligation("epilogue", (_shifted(f),), (_shifted(f),), {"f": (-1000, 1000)}, Policy(0))
    assert reflexive.identical(ob)
    v = check(ob)
    assert v.status == Status.PROVEN and v.max_diff == 0
    assert v.details["procedures"][0].get("closed_form") == "identical"


def test_identical_sides_undefined_at_the_corner_go_to_the_search():
    """The reference undefined at the lower corner (acc * 2 leaves int32 there) but not
    everywhere: the search decides it (proven where both are defined)."""
    f = Var("f")
    lo = -(1 << 30) - 5
    ob = Obligation("epilogue", (_shifted(f),), (_shifted(f),), {"f": (lo, 0)}, Policy(0))
    assert not reflexive.identical(ob)
    v = check(ob)
    assert v.status == Status.PROVEN and "closed_form" not in v.details["procedures"][0]


def test_identical_sides_undefined_everywhere_stay_vacuous():
    f = Var("f")
    ob = Obligation(
        "epilogue", (_shifted(f),), (_shifted(f),), {"f": (1 << 30, (1 << 30) + 9)}, Policy(0)
    )
    assert not reflexive.identical(ob)
    with pytest.raises(VacuousObligation):
        check(ob)


def test_sides_that_differ_are_not_identical():
    f = Var("f")
    ob = Obligation("epilogue", (_shifted(f),), (op("add", _shifted(f), Const(0)),),
                    {"f": (0, 9)}, Policy(0))  # fmt: skip
    assert not reflexive.identical(ob)
    assert "closed_form" not in check(ob).details["procedures"][0]
