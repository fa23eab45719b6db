"""How large the integers of an obligation can get: interval bounds per primitive.

The concrete procedures compute in int64 and the SMT encoding in fixed-width
bit-vectors; a value that does not fit would wrap silently and the verdict would
be about other numbers. `magnitude(ob)` bounds |v| for every variable, constant,
primitive input and output of both sides (and their differences), so a procedure
can decline (numpy) or widen its words (SMT) instead.

Inside a requantizer the intermediates are at most 2^62 wherever its
precondition holds (an int32 input times a multiplier below 2^31); where it fails
the value is undefined and never used (see `primitives`), so only the input and
the output range count. A primitive without a transfer rule here gives no bound
(None): callers then stay with their default width, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import lru_cache
from typing import Any

from . import terms as T
from .by_identity import ByIdentity
from .domain import KernelError
from .inttypes import int_type
from .obligation import Obligation

Interval = tuple[int, int]


def _hull(*vals: int) -> Interval:
    return min(vals), max(vals)


def _type_iv(name: str) -> Interval:
    t = int_type(name)
    return t.min, t.max


def _clamp(iv: Interval, lo: int, hi: int) -> Interval:
    return min(max(iv[0], lo), hi), min(max(iv[1], lo), hi)


def _dot(ivs: list[Interval], p: dict) -> Interval:
    lo = hi = int(p.get("bias", 0))
    for (a, b), w in zip(ivs, p["weights"], strict=True):
        c = int(w) - int(p["w_zp"])
        z = int(p["x_zp"])
        t = _hull((a - z) * c, (b - z) * c)
        lo, hi = lo + t[0], hi + t[1]
    return lo, hi


@lru_cache(maxsize=4096)
def _cached_hull(table: tuple) -> Interval:
    return _hull(*map(int, table))


def _table_hull(table: Any) -> Interval:
    """The smallest and largest entry of a table (once per table: per-column epilogues
    share theirs, and each has 256 entries or more)."""
    if isinstance(table, tuple):
        return _cached_hull(table)
    return _hull(*(int(x) for x in table))


def _floordiv(iv: Interval, c: int) -> Interval:
    return iv[0] // c, iv[1] // c


RULES: dict[str, Callable[[list[Interval], dict], Interval]] = {
    "add": lambda v, p: (v[0][0] + v[1][0], v[0][1] + v[1][1]),
    "sub": lambda v, p: (v[0][0] - v[1][1], v[0][1] - v[1][0]),
    "add_const": lambda v, p: (v[0][0] + int(p["c"]), v[0][1] + int(p["c"])),
    "mul_const": lambda v, p: _hull(v[0][0] * int(p["c"]), v[0][1] * int(p["c"])),
    "clip": lambda v, p: _clamp(v[0], int(p["lo"]), int(p["hi"])),
    "saturate": lambda v, p: _clamp(v[0], *_type_iv(p["type"])),
    "wrap": lambda v, p: _type_iv(p["type"]),
    "requant_double": lambda v, p: _type_iv(p["out"]),
    "requant_single": lambda v, p: _type_iv(p["out"]),
    "requant_float": lambda v, p: _type_iv(p["out"]),
    "lut": lambda v, p: _table_hull(p["table"]),
    "dot": _dot,
    "qlinear_binary": lambda v, p: _type_iv(p["dtype"]),
    "npu_eltwise": lambda v, p: _type_iv(p["dtype"]),
    "floordiv_const": lambda v, p: _floordiv(v[0], int(p["c"])),
    "mod_const": lambda v, p: (min(0, int(p["c"]) - 1), max(0, int(p["c"]) - 1)),
}


class _Intervals:
    """Interval of each term of `ob` (memoised), and the largest magnitude seen so far."""

    def __init__(self, ob: Obligation) -> None:
        self.ob = ob
        self.peak = 0
        self.known = True
        self.memo: dict[int, Interval | None] = {}
        for lo, hi in ob.ranges.values():
            self.see((lo, hi))

    def see(self, iv: Interval) -> None:
        self.peak = max(self.peak, abs(iv[0]), abs(iv[1]))

    def __call__(self, t: T.Term) -> Interval | None:
        if id(t) in self.memo:
            return self.memo[id(t)]
        iv: Interval | None
        if isinstance(t, T.Var):
            lo, hi = self.ob.ranges[t.name]
            iv = (int(lo), int(hi))
        elif isinstance(t, T.Const):
            iv = (int(t.value), int(t.value))
        else:
            args = [self(a) for a in t.args]
            ivs = [a for a in args if a is not None]
            rule = RULES.get(t.prim)
            if rule is None or len(ivs) != len(args):
                self.known = False
                iv = None
            else:
                iv = rule(ivs, t.kwargs)
        if iv is not None:
            self.see(iv)
        self.memo[id(t)] = iv
        return iv


def magnitude(ob: Obligation) -> int | None:
    """An upper bound on |v| over every value the obligation's evaluation forms.

    Includes the ranges, constants, every primitive's inputs and outputs, and the
    output differences; None where some primitive has no rule (bound unknown).
    Kept by the obligation's identity (`_KNOWN`): a decision and its replay ask about the
    same one.
    """
    hit = _KNOWN.get(ob)
    if hit is None:
        hit = _KNOWN.put(ob, (_magnitude(ob),))
    return hit[0]


# magnitude's answers, in a 1-tuple (None is an answer), for the last obligation objects
_KNOWN: ByIdentity[tuple[int | None]] = ByIdentity(8)


def _magnitude(ob: Obligation) -> int | None:
    go = _Intervals(ob)
    for tb, ta in zip(ob.outputs_before, ob.outputs_after, strict=True):
        b, a = go(tb), go(ta)
        if b is not None and a is not None:
            go.see((0, max(abs(b[0]), abs(b[1])) + max(abs(a[0]), abs(a[1]))))
    return go.peak if go.known else None


def diff_bound(ob: Obligation) -> int | None:
    """An upper bound on |before - after| over every output pair (0 without outputs); None
    where some primitive has no rule. A policy bound at or above it allows every pair."""
    go = _Intervals(ob)
    most = 0
    for tb, ta in zip(ob.outputs_before, ob.outputs_after, strict=True):
        b, a = go(tb), go(ta)
        if b is None or a is None:
            return None
        most = max(most, b[1] - a[0], a[1] - b[0])
    return most


def fits(ob: Obligation, limit: int = 1 << 62) -> bool:
    """Every value the evaluation forms is below `limit` in magnitude.

    False where some primitive has no bound rule: an unknown bound never counts as fitting
    (numpy procedures then decline instead of risking a silent int64 wrap).
    """
    m = magnitude(ob)
    return m is not None and m < limit


def fits_at(ob: Obligation, point: Mapping[str, int], limit: int = 1 << 63) -> bool:
    """`fits` for the obligation at one assignment of its variables (a witness to replay).

    A point inside the ranges forms a subset of the values `magnitude(ob)` bounds, so that
    bound, when below `limit`, settles it; else the bound at the point itself decides.
    """
    inside = all(lo <= point[n] <= hi for n, (lo, hi) in ob.ranges.items() if n in point)
    if inside and fits(ob, limit):
        return True
    at = {n: (int(v), int(v)) for n, v in point.items()}
    return fits(replace(ob, ranges={**ob.ranges, **at}), limit)


def bits_needed(ob: Obligation, default: int = 64) -> int:
    """Signed bit-vector width holding every value, and twice it (the rank order).

    `default` when everything fits it, else the next multiple of 32 that does. A primitive
    without a bound rule is a kernel bug (every primitive needs one: a test checks it), so
    it raises rather than guess a width that might wrap.
    """
    m = magnitude(ob)
    if m is None:
        raise KernelError("a primitive of this obligation has no bound rule (prover.bounds)")
    need = (2 * m + 1).bit_length() + 1
    if need <= default:
        return default
    return -(-need // 32) * 32
