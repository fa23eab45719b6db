"""The SMT encoding of an obligation (QF_BV) and its SMT-LIB2 export.

The obligation holds iff `ranges /\\ reference preconditions /\\ violation` is
unsat, where `violation` says an implementation precondition fails or some
output pair differs by more than the policy's bound.
Terms are interpreted with the kernel's `Z3` domain: 64-bit signed bit-vectors,
or wider where `bounds.bits_needed` finds a range, constant or intermediate that
would not fit (never a silent wrap), so the SMT meaning is the kernel's meaning;
the text is then handed unchanged to every backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from . import terms as T
from .bounds import bits_needed, diff_bound
from .domain import KernelError, Z3Domain
from .lazy import lazy_module
from .obligation import Obligation

if TYPE_CHECKING:
    import z3
else:
    z3 = lazy_module("z3")


WIDTH = 64


def _bool(b: object) -> z3.BoolRef:
    return b if isinstance(b, z3.BoolRef) else z3.BoolVal(bool(b))


def absdiff(a: z3.BitVecRef, b: z3.BitVecRef) -> z3.BitVecRef:
    return z3.If(a >= b, a - b, b - a)


def rank(v: z3.BitVecRef) -> z3.BitVecRef:
    """Simplicity rank 0, 1, -1, 2, -2, ... -> 0, 1, 2, 3, 4, ... (see counterexample.rank)."""
    return z3.If(v > 0, 2 * v - 1, -2 * v)


@dataclass
class Encoding:
    """Z3 terms of one obligation: variables, domain constraints and output differences.

    The domain is the ranges and the reference side's preconditions (assumed);
    the implementation side's preconditions (`defined`) are part of what must be
    proven, so `violation` holds where they fail (see `primitives`).
    """

    ob: Obligation

    @cached_property
    def width(self) -> int:
        """64 bits, or wider where a range, constant or intermediate would not fit."""
        return bits_needed(self.ob, WIDTH)

    @cached_property
    def bound(self) -> int:
        """The policy's bound, capped at the largest possible output difference
        (`bounds.diff_bound`, which fits `width`): a larger constant would wrap in the
        bit-vectors (2^63 reads as -2^63), and a bound at the cap allows every pair already."""
        most = diff_bound(self.ob)
        if most is None:
            raise KernelError("a primitive of this obligation has no bound rule (prover.bounds)")
        return min(self.ob.policy.bound, most)

    @cached_property
    def _built(self):
        d = Z3Domain(self.width)
        xs = {name: d.var(name) for name in self.ob.variables}
        dom = []
        for name, (lo, hi) in self.ob.ranges.items():
            dom += [xs[name] >= lo, xs[name] <= hi]
        pre_b: list = []
        pre_a: list = []
        bs = [T.evaluate(t, d, xs, pre_b) for t in self.ob.outputs_before]
        as_ = [T.evaluate(t, d, xs, pre_a) for t in self.ob.outputs_after]
        dom += [_bool(p) for p in pre_b]
        defined = [_bool(p) for p in pre_a]
        diffs = [absdiff(d.lift(b), d.lift(a)) for b, a in zip(bs, as_, strict=True)]
        return xs, dom, diffs, defined

    @property
    def vars(self) -> dict[str, z3.BitVecRef]:
        return self._built[0]

    @property
    def domain(self) -> list[z3.BoolRef]:
        """Ranges and the reference side's preconditions."""
        return self._built[1]

    @property
    def diffs(self) -> list[z3.BitVecRef]:
        return self._built[2]

    @cached_property
    def defined(self) -> z3.BoolRef:
        """The implementation side's preconditions all hold."""
        parts = self._built[3]
        if not parts:
            return z3.BoolVal(True)
        return parts[0] if len(parts) == 1 else z3.And(parts)

    @cached_property
    def _always_defined(self) -> bool:
        return z3.is_true(z3.simplify(self.defined))

    def violation(self, at_least: int | None = None) -> z3.BoolRef:
        """The implementation is undefined or some output differs by more than the bound.

        With `at_least`: the implementation is defined and some output differs by at
        least `at_least` (the largest-difference search).
        """
        if at_least is None:
            parts = [dd > self.bound for dd in self.diffs]
        else:
            parts = [dd >= at_least for dd in self.diffs]
        # A one-argument `or` is not SMT-LIB (Bitwuzla rejects it).
        off = parts[0] if len(parts) == 1 else z3.Or(parts)
        if self._always_defined:
            return off
        if at_least is not None:
            return z3.And(self.defined, off)
        return z3.Or(z3.Not(self.defined), off)

    def rank_at_most(self, name: str, r: int) -> z3.BoolRef:
        return z3.ULE(rank(self.vars[name]), r)

    def script(self, *constraints: z3.BoolRef, check_sat: bool = False) -> str:
        """SMT-LIB2 text asserting the domain and `constraints`."""
        s = z3.Solver()
        s.add(*self.domain, *constraints)
        text = "(set-logic QF_BV)\n" + s.sexpr()
        return text + ("(check-sat)\n" if check_sat else "")


def to_smtlib(ob: Obligation) -> str:
    """The obligation's violation query as a self-contained SMT-LIB2 script (sat = refuted)."""
    enc = Encoding(ob)
    head = f"; obligation {ob.hash} policy {ob.policy}: sat means refuted\n"
    return head + enc.script(enc.violation(), check_sat=True)
