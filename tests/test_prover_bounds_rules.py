"""Every kernel primitive has a bound rule, and an unknown bound never counts as fitting."""

from __future__ import annotations

import pytest

from prover import bounds
from prover.domain import KernelError
from prover.obligation import Obligation
from prover.primitives import PRIMITIVES
from prover.terms import Var, op


def test_every_primitive_has_a_bound_rule() -> None:
    assert sorted(set(PRIMITIVES) - set(bounds.RULES)) == []


def test_a_primitive_without_a_rule_neither_fits_nor_gets_a_guessed_width(monkeypatch) -> None:
    def made() -> Obligation:
        return Obligation(
            "epilogue",
            before=op("add_const", Var("acc"), c=1),
            after=op("add_const", Var("acc"), c=1),
            ranges={"acc": (-10, 10)},
            policy="bitwise",
        )

    ob = made()
    assert bounds.fits(ob) and bounds.bits_needed(ob) == 64
    monkeypatch.delitem(bounds.RULES, "add_const")
    assert bounds.magnitude(ob) == 22  # kept for this object (bounds._KNOWN): 11 + 11
    ob = made()  # a new object is bounded anew, without the rule
    assert bounds.magnitude(ob) is None
    assert not bounds.fits(ob)
    with pytest.raises(KernelError, match="no bound rule"):
        bounds.bits_needed(ob)


def test_fits_at_a_point_uses_the_ranges_bound_only_for_points_inside_them() -> None:
    def times(c: int, lo: int, hi: int) -> Obligation:
        t = op("mul_const", Var("acc"), c=c)
        return Obligation("epilogue", before=t, after=t, ranges={"acc": (lo, hi)}, policy="bitwise")

    wide = times(1 << 40, -(1 << 30), 1 << 30)  # 2^70 over the ranges
    assert not bounds.fits(wide, 1 << 63)
    assert bounds.fits_at(wide, {"acc": 1})  # 2^40 (twice, the difference) at the point
    assert not bounds.fits_at(wide, {"acc": 1 << 30})
    small = times(1 << 30, -10, 10)  # fits over its ranges, but not at a point outside them
    assert bounds.fits(small, 1 << 63)
    assert bounds.fits_at(small, {"acc": 10})
    assert not bounds.fits_at(small, {"acc": 1 << 40})
