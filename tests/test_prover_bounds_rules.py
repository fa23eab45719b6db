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
    ob = Obligation(
        "epilogue",
        before=op("add_const", Var("acc"), c=1),
        after=op("add_const", Var("acc"), c=1),
        ranges={"acc": (-10, 10)},
        policy="bitwise",
    )
    assert bounds.fits(ob) and bounds.bits_needed(ob) == 64
    monkeypatch.delitem(bounds.RULES, "add_const")
    assert bounds.magnitude(ob) is None
    assert not bounds.fits(ob)
    with pytest.raises(KernelError, match="no bound rule"):
        bounds.bits_needed(ob)
