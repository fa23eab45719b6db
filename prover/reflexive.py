"""Obligations whose two sides are the same terms: they hold without a search.

Where `before` and `after` are equal term by term (structurally), the two sides compute
the same value wherever the reference side is defined, and the implementation side is
defined there too (the same primitives with the same preconditions), so the obligation
holds under every policy with a largest difference of 0, unless it is vacuous (the
reference defined nowhere in the ranges: `VacuousObligation` from the search). It is not
vacuous where the reference is defined at one point, which is checked at the ranges'
lower corner; an obligation undefined there is left to the search.
"""

from __future__ import annotations

from .counterexample import evaluate_point
from .obligation import Obligation

_KNOWN: dict[str, bool] = {}  # obligation hash -> identical (a batch asks twice)
_KNOWN_MAX = 65536


def identical(ob: Obligation) -> bool:
    """Whether `ob`'s sides are the same terms and its reference is defined at the lower
    corner of its ranges (module docstring). False says nothing about the obligation."""
    if ob.outputs_before != ob.outputs_after:
        return False
    if any(lo > hi for lo, hi in ob.ranges.values()):
        return False
    known = _KNOWN.get(ob.hash)
    if known is None:
        _, _, defined, _ = evaluate_point(ob, {v: lo for v, (lo, _) in ob.ranges.items()})
        if len(_KNOWN) >= _KNOWN_MAX:
            _KNOWN.clear()
        known = _KNOWN[ob.hash] = bool(defined)
    return known
