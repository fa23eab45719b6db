"""Index maps in closed form: terms over a flat index `f` as sums of its mixed-radix digits.

A layout obligation (`index_map`: a Transpose, Reshape or Slice against the NPU's strided
gather) states two coordinate tuples as terms over one variable `f` in `[0, N-1]`, built
from `floordiv_const`, `mod_const`, `mul_const`, `add` and constants. Each such term is,
exactly on that range, a linear form `k + sum(c_i * D(a_i, b_i))` in the digits
`D(a, b) = floor(f / a) mod b` (`b = None`: no mod) when these rules apply:

- `f` is `D(1, None)`; a digit is 0 where `a > N - 1` or `b == 1`, and `D(a, b)` is
  `D(a, None)` where `floor((N - 1) / a) < b` (the mod never applies);
- `floor(D(a, b) / c) = D(a*c, b/c)` and `D(a, b) mod c = D(a, c)` where `c` divides `b`
  (or `b` is None);
- a digit splits, `D(a, b) = D(a, g) + g*D(a*g, b/g)` where `g` divides `b` (or `b` is
  None), so that a divisor `c` divides the upper part's coefficient;
- a sum of nonnegative terms `X = c*H + L`, where `H` gathers the terms whose coefficient
  (and the constant's multiple) `c` divides and `L` the rest, has `floor(X / c) = H` and
  `X mod c = L` whenever `0 <= L <= max(L) < c` (every digit is nonnegative and bounded);
- `c*D(a, b) + c*b*D(a*b, b2)` is `c*D(a, b*b2)` (adjacent digits merge, so the digits
  of a row-major flat index recompose to `f`).

Two tuples whose forms are equal term by term are equal for every `f` in the range: the
obligation holds, with no search. Any term outside these rules (a negative coefficient, a
division that splits a digit) gives no form, and the caller decides the obligation by
its general procedure; a difference of forms is never taken as a refutation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from . import terms as T
from .errors import NotApplicable
from .obligation import Obligation

Digit = tuple[int, int | None]  # (a, b): floor(f / a) mod b; b None: floor(f / a)


class _Form:
    """`const + sum(coef * digit)` over `f` in `[0, n - 1]`, digits canonical."""

    __slots__ = ("n", "terms", "const")

    def __init__(self, n: int, terms: dict[Digit, int], const: int) -> None:
        self.n, self.terms, self.const = n, {d: c for d, c in terms.items() if c}, const

    def key(self) -> tuple:
        return (self.const, tuple(sorted(self.terms.items(), key=_order)))

    def dmax(self, d: Digit) -> int:
        """The largest value of digit `d` on the range."""
        a, b = d
        top = (self.n - 1) // a
        return top if b is None else min(top, b - 1)


def _order(item: tuple[Digit, int]) -> tuple:
    (a, b), c = item
    return (a, -1 if b is None else b, c)


def _digit(n: int, a: int, b: int | None) -> Digit | None:
    """The canonical digit `floor(f / a) mod b` on `[0, n - 1]`; None where it is 0."""
    if a > n - 1 or b == 1:
        return None
    if b is not None and (n - 1) // a < b:
        b = None
    return (a, b)


def _single(n: int, d: Digit | None) -> _Form:
    return _Form(n, {} if d is None else {d: 1}, 0)


def _merge(form: _Form) -> _Form:
    """Merge `c*D(a, b) + c*b*D(a*b, b2)` into `c*D(a, b*b2)` until none is left."""
    terms = dict(form.terms)
    changed = True
    while changed:
        changed = False
        for (a, b), c in list(terms.items()):
            if b is None or (a, b) not in terms:
                continue
            hi = next(
                (d for d in terms if d[0] == a * b and terms[d] == c * b and d != (a, b)), None
            )
            if hi is None:
                continue
            b2 = hi[1]
            del terms[(a, b)], terms[hi]
            merged = _digit(form.n, a, None if b2 is None else b * b2)
            if merged is not None:
                terms[merged] = terms.get(merged, 0) + c
            changed = True
            break
    return _Form(form.n, terms, form.const)


def _divmod(form: _Form, c: int, want_quotient: bool) -> _Form:
    """`floor(X / c)` or `X mod c` of the form `X` (rules in the module docstring)."""
    if c <= 0:
        raise NotApplicable("no closed form")
    if c == 1:
        return form if want_quotient else _Form(form.n, {}, 0)
    if len(form.terms) == 1 and form.const == 0:
        ((a, b), coef) = next(iter(form.terms.items()))
        if coef == 1 and (b is None or b % c == 0):
            if want_quotient:
                return _single(form.n, _digit(form.n, a * c, None if b is None else b // c))
            return _single(form.n, _digit(form.n, a, c))
    if form.const < 0 or any(v < 0 for v in form.terms.values()):
        raise NotApplicable("no closed form")
    form = _split(form, c)
    high = {d: v // c for d, v in form.terms.items() if v % c == 0}
    low = {d: v for d, v in form.terms.items() if v % c != 0}
    low_max = form.const % c + sum(v * form.dmax(d) for d, v in low.items())
    if low_max >= c:
        raise NotApplicable("no closed form")
    if want_quotient:
        return _merge(_Form(form.n, high, form.const // c))
    return _merge(_Form(form.n, low, form.const % c))


def _split(form: _Form, c: int) -> _Form:
    """Each digit `D(a, b)` whose coefficient `v` the divisor `c` does not divide, split
    into `D(a, g) + g*D(a*g, b/g)` where `g = c / gcd(v, c)` divides `b` (or `b` is None),
    so that the upper part's coefficient `v*g` is a multiple of `c`."""
    terms: dict[Digit, int] = {}
    for (a, b), v in form.terms.items():
        g = c // math.gcd(v, c)
        if v % c == 0 or g == 1 or (b is not None and b % g != 0):
            terms[(a, b)] = terms.get((a, b), 0) + v
            continue
        for d, w in (
            (_digit(form.n, a, g), v),
            (_digit(form.n, a * g, None if b is None else b // g), v * g),
        ):
            if d is not None:
                terms[d] = terms.get(d, 0) + w
    return _Form(form.n, terms, form.const)


def form_of(t: T.Term, var: str, n: int) -> _Form:
    """The closed form of `t` over `var` in `[0, n - 1]`; `NotApplicable` outside the rules."""
    if isinstance(t, T.Var):
        if t.name != var:
            raise NotApplicable("no closed form")
        return _single(n, _digit(n, 1, None))
    if isinstance(t, T.Const):
        return _Form(n, {}, int(t.value))
    if not isinstance(t, T.Op):
        raise NotApplicable("no closed form")
    p = dict(t.params)
    if t.prim == "add" and len(t.args) == 2:
        x, y = (form_of(a, var, n) for a in t.args)
        terms = dict(x.terms)
        for d, v in y.terms.items():
            terms[d] = terms.get(d, 0) + v
        return _merge(_Form(n, terms, x.const + y.const))
    if len(t.args) != 1:
        raise NotApplicable("no closed form")
    x = form_of(t.args[0], var, n)
    c = p.get("c")
    if type(c) is not int:
        raise NotApplicable("no closed form")
    if t.prim == "mul_const":
        return _merge(_Form(n, {d: v * c for d, v in x.terms.items()}, x.const * c))
    if t.prim == "floordiv_const":
        return _divmod(x, c, True)
    if t.prim == "mod_const":
        return _divmod(x, c, False)
    raise NotApplicable("no closed form")


def same_index_maps(ob: Obligation) -> bool:
    """Whether `ob` (one variable ranging over `[0, N-1]`) has before and after outputs
    with equal closed forms, term by term: then it holds for every value (module
    docstring). False says nothing about the obligation."""
    if len(ob.variables) != 1:
        return False
    (var,) = ob.variables
    lo, hi = ob.ranges[var]
    if lo != 0 or hi < 0:
        return False
    return _same(ob.outputs_before, ob.outputs_after, var, hi + 1)


def _same(before: Sequence[T.Term], after: Sequence[T.Term], var: str, n: int) -> bool:
    if len(before) != len(after):
        return False
    try:
        return all(
            form_of(b, var, n).key() == form_of(a, var, n).key()
            for b, a in zip(before, after, strict=True)
        )
    except NotApplicable:
        return False
