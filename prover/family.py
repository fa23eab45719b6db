"""Column families: the per-column obligations of one op kept as two templates and arrays.

A per-channel op has one obligation per output column, and they differ only in the float
scale of one `requant_float` and in the column's accumulator range. Built as thousands of
`Obligation` objects they cost about 0.2 ms each before anything is decided (terms,
canonical text, hash, bounds): mobilenet_v2 has about 17,000. A `Family` keeps each side
once, as a template whose `requant_float` has `HOLE` for its scale, and the per-column
scales and ranges in arrays.

- `column(i)` is member i's obligation: both templates with the hole filled, over `var` in
  `[lo[i], hi[i]]`, exactly the `Obligation` a per-column caller builds (`from_terms`
  checks every member against the caller's own terms; a caller building the arrays
  itself compares members with its own terms, `matches`).
- `identities()` decides, vectorised over the members, which are identities: both sides
  the same term, every kernel parameter valid and every precondition of that term holding
  on the whole range (`total_template`). Such an obligation holds under every policy with
  largest difference 0, and is not vacuous; no solver or evaluation is needed. A member
  that is not an identity is decided on its own (`column(i)`), as before.
- `hash`: the sha256 of the canonical JSON (`to_json`: the templates' canonical texts, the
  arrays as lists), so a family of identities is cited by one hash across machines.
- `prove_identities`: the identities of a family proven as one verdict, kept in a proof
  store as one record (served after re-deciding it, as any stored "proven" is), so the
  ro gate asks for one record per family, not one per column.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from . import terms as T
from .errors import StoreCorrupt, StoreMiss
from .inttypes import INT32_MAX, INT32_MIN, int_type
from .obligation import Obligation
from .policy import Policy
from .primitives import SEMANTICS_VERSION, primitive
from .proofstore import ProofStore
from .verdict import Status, Verdict

HOLE = "<per column>"  # the scale of a template's `requant_float`
FORMAT = "npu-family/1"
HOLE_PRIM = "requant_float"


def _is_hole(u: T.Op) -> bool:
    return u.prim == HOLE_PRIM and dict(u.params).get("scale") == HOLE


def with_hole(t: T.Term) -> tuple[T.Term, float] | None:
    """(`t` with the scale of its one `requant_float` replaced by `HOLE`, that scale), or
    None when `t` has no such op or more than one."""
    found: list[float] = []

    def walk(u: T.Term) -> T.Term:
        if not isinstance(u, T.Op):
            return u
        args = tuple(walk(a) for a in u.args)
        if u.prim != HOLE_PRIM:
            return u if args == u.args else T.Op(u.prim, args, u.params)
        found.append(float(u.kwargs["scale"]))
        params = tuple((k, HOLE if k == "scale" else v) for k, v in u.params)
        return T.Op(u.prim, args, params)

    out = walk(t)
    return (out, found[0]) if len(found) == 1 else None


def hole_path(template: T.Term) -> tuple[int, ...] | None:
    """The argument indices from `template`'s root to its hole op, or None without one."""
    if not isinstance(template, T.Op):
        return None
    if _is_hole(template):
        return ()
    for i, a in enumerate(template.args):
        sub = hole_path(a)
        if sub is not None:
            return (i, *sub)
    return None


def scale_in(t: T.Term, template: T.Term, path: tuple[int, ...]) -> float | None:
    """The scale `t` fills `template`'s hole with (`path`: `hole_path(template)`), or None
    when `t` is not `template` with its hole filled: `with_hole(t)`'s scale where that
    gives `template` (tested), without rebuilding `t`. Every op on the path is compared by
    its name and parameters, every argument off the path as a whole."""
    u: T.Term = t
    v: T.Term = template
    for i in path:
        if not (isinstance(u, T.Op) and isinstance(v, T.Op)):
            return None
        if u.prim != v.prim or u.params != v.params or len(u.args) != len(v.args):
            return None
        for k, (a, b) in enumerate(zip(u.args, v.args, strict=True)):
            if k != i and a is not b and a != b:
                return None
        u, v = u.args[i], v.args[i]
    if not (isinstance(u, T.Op) and isinstance(v, T.Op)):
        return None
    if u.prim != HOLE_PRIM or u.args != v.args:
        return None
    kw, tkw = u.kwargs, v.kwargs
    if kw.keys() != tkw.keys() or any(kw[k] != tkw[k] for k in kw if k != "scale"):
        return None
    return float(kw["scale"])


def fill(template: T.Term, scale: float) -> T.Term:
    """`template` with its hole filled by `scale`."""
    if not isinstance(template, T.Op):
        return template
    args = tuple(fill(a, scale) for a in template.args)
    if _is_hole(template):
        params = tuple((k, scale if k == "scale" else v) for k, v in template.params)
        return T.Op(template.prim, args, params)
    return template if args == template.args else T.Op(template.prim, args, template.params)


def _out_type(t: T.Term) -> tuple[int, int] | None:
    """The values an op of the template can produce, where its kind bounds them."""
    if not isinstance(t, T.Op):
        return None
    kw = t.kwargs
    if t.prim == "requant_float":
        ty = int_type(kw["out"])
        return ty.min, ty.max
    if t.prim == "saturate":
        ty = int_type(kw["type"])
        return ty.min, ty.max
    if t.prim == "clip":
        return int(kw["lo"]), int(kw["hi"])
    return None


def total_template(template: T.Term, var: str) -> bool:
    """Whether every op of `template` is defined on every value it can receive when `var`
    is any int32: its hole op is `requant_float(var)` with a zero point inside its output
    type, and every other op has no precondition (and a clip's limits are ordered), or is a
    `lut` whose argument's values lie inside its input type and whose table has one entry
    per value of it. Then an identity over a
    non-empty int32 range is not vacuous and raises no kernel error."""
    if not isinstance(template, T.Op):
        return False
    holes = 0
    stack: list[T.Term] = [template]
    while stack:
        u = stack.pop()
        if isinstance(u, T.Var | T.Const):
            continue
        assert isinstance(u, T.Op)
        kw = u.kwargs
        if _is_hole(u):
            if u.args != (T.Var(var),) or not int_type(kw["out"]).contains(int(kw["zp"])):
                return False
            holes += 1
            continue
        if u.prim == "clip" and int(kw["lo"]) > int(kw["hi"]):
            return False
        if u.prim == "lut":
            got = _out_type(u.args[0])
            ty = int_type(kw["in_type"])
            if got is None or not (ty.min <= got[0] and got[1] <= ty.max):
                return False
            if len(kw["table"]) != ty.max - ty.min + 1:
                return False  # the kernel rejects a table of another size
        elif primitive(u.prim).precondition is not None:
            return False
        if any(isinstance(a, T.Var) for a in u.args):
            return False  # the variable reaches an op other than the hole directly
        stack.extend(u.args)
    return holes == 1


def _valid_scales(s: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        s32 = s.astype(np.float32)
    return np.isfinite(s32) & (s32 > 0)


@dataclass(frozen=True, eq=False)
class Family:
    """Member i: `fill(before, scale_before[i])` against `fill(after, scale_after[i])`, over
    `var` in `[lo[i], hi[i]]`, under `policy`; `columns[i]` is the output column it is of."""

    kind: str
    var: str
    before: T.Term
    after: T.Term
    scale_before: np.ndarray  # float64
    scale_after: np.ndarray  # float64
    lo: np.ndarray  # int64
    hi: np.ndarray  # int64
    columns: np.ndarray  # int64
    policy: Policy
    note: str = ""  # not part of the hash

    def __len__(self) -> int:
        return int(self.columns.size)

    def column(self, i: int) -> Obligation:
        """Member i's obligation, as a per-column caller builds it."""
        return Obligation(
            self.kind,
            fill(self.before, float(self.scale_before[i])),
            fill(self.after, float(self.scale_after[i])),
            {self.var: (int(self.lo[i]), int(self.hi[i]))},
            self.policy,
            note=f"{self.note} columns {int(self.columns[i])}..{int(self.columns[i])}",
        )

    def identities(self) -> np.ndarray:
        """Per member: whether its obligation is an identity (see the module docstring)."""
        n = len(self)
        if T.canonical_text(self.before) != T.canonical_text(self.after):
            return np.zeros(n, dtype=bool)
        if not total_template(self.before, self.var):
            return np.zeros(n, dtype=bool)
        return (
            (self.scale_before == self.scale_after)
            & _valid_scales(self.scale_before)
            & (self.lo <= self.hi)
            & (self.lo >= INT32_MIN)
            & (self.hi <= INT32_MAX)
        )

    def subset(self, keep: np.ndarray) -> Family:
        """The members where `keep` is true (the family itself when that is all of them, so
        its hash is computed once)."""
        if bool(np.all(keep)) and np.size(keep) == len(self):
            return self
        return Family(
            self.kind,
            self.var,
            self.before,
            self.after,
            self.scale_before[keep],
            self.scale_after[keep],
            self.lo[keep],
            self.hi[keep],
            self.columns[keep],
            self.policy,
            self.note,
        )

    def to_json(self) -> dict[str, Any]:
        """Canonical JSON-able form (everything that determines the members' verdicts)."""
        return {
            "before": json.loads(T.canonical_text(self.before)),
            "after": json.loads(T.canonical_text(self.after)),
            **self._members_json(),
        }

    def _members_json(self) -> dict[str, Any]:
        """`to_json` but the two templates."""
        return {
            "format": FORMAT,
            "kind": self.kind,
            "var": self.var,
            "scale_before": self.scale_before.tolist(),
            "scale_after": self.scale_after.tolist(),
            "lo": self.lo.tolist(),
            "hi": self.hi.tolist(),
            "columns": self.columns.tolist(),
            "policy": str(self.policy),
            "semantics": SEMANTICS_VERSION,
        }

    @cached_property
    def canonical(self) -> str:
        """`T.canonical(self.to_json())`, with the templates' own canonical texts spliced in
        (their keys sort first) rather than parsed back and encoded again."""
        members = self._members_json()
        texts = {k: T.canonical(v) for k, v in members.items() if not k.startswith("scale_")}
        # a column's scale repeats across members (one per tensor, a few per channel):
        # each distinct value is written once, as the encoder writes a float
        texts |= {"scale_before": _floats_text(self.scale_before)}
        same = np.array_equal(_bits(self.scale_before), _bits(self.scale_after))
        # an identity's two sides have the same scales (bit for bit): written once
        texts |= {"scale_after": texts["scale_before"] if same else _floats_text(self.scale_after)}
        texts |= {"before": T.canonical_text(self.before), "after": T.canonical_text(self.after)}
        return "{" + ",".join(T.canonical(k) + ":" + texts[k] for k in sorted(texts)) + "}"

    @cached_property
    def hash(self) -> str:
        """Stable sha256 hex digest of the canonical JSON."""
        return hashlib.sha256(self.canonical.encode()).hexdigest()


def _bits(values: np.ndarray) -> np.ndarray:
    """The float64 values' bit patterns (0.0 and -0.0 differ, a NaN equals itself)."""
    return np.ascontiguousarray(values, dtype=np.float64).view(np.int64)


def _floats_text(values: np.ndarray) -> str:
    """`T.canonical(values.tolist())` for a 1-D float64 array, each distinct value's text
    built once (by bit pattern: 0.0 and -0.0 are written apart)."""
    a = np.ascontiguousarray(values, dtype=np.float64)
    if a.size == 0:
        return "[]"
    bits = _bits(a)
    order = np.argsort(bits, kind="stable")
    first = np.concatenate(([True], bits[order][1:] != bits[order][:-1]))
    inverse = np.empty(a.size, dtype=np.intp)
    inverse[order] = np.cumsum(first) - 1
    # the encoder writes the distinct values (no float's text holds a comma)
    texts = np.array(T.canonical(a[order][first].tolist())[1:-1].split(","), dtype=object)
    return "[" + ",".join(texts[inverse].tolist()) + "]"


def family(
    kind: str,
    var: str,
    before: T.Term,
    after: T.Term,
    scale_before: Sequence[float] | np.ndarray,
    scale_after: Sequence[float] | np.ndarray,
    lo: Sequence[int] | np.ndarray,
    hi: Sequence[int] | np.ndarray,
    columns: Sequence[int] | np.ndarray,
    policy: Policy,
    note: str = "",
) -> Family:
    """A `Family` from templates (each with one hole) and per-member arrays."""
    sb = np.asarray(scale_before, dtype=np.float64)
    sa = np.asarray(scale_after, dtype=np.float64)
    lo_a, hi_a, cols = (np.asarray(a, dtype=np.int64) for a in (lo, hi, columns))
    n = sb.size
    if n == 0 or any(a.size != n for a in (sa, lo_a, hi_a, cols)):
        raise ValueError("a family's arrays must have one entry per member, and one at least")
    for a in (sb, sa, lo_a, hi_a, cols):
        a.setflags(write=False)
    return Family(kind, var, before, after, sb, sa, lo_a, hi_a, cols, policy, note)


def matches(fam: Family, i: int, before: T.Term, after: T.Term) -> bool:
    """Whether member i's two sides are `before` and `after` (a caller's own terms)."""
    return fill(fam.before, float(fam.scale_before[i])) == before and (
        fill(fam.after, float(fam.scale_after[i])) == after
    )


def from_terms(
    kind: str,
    var: str,
    befores: Sequence[T.Term],
    afters: Sequence[T.Term],
    lo: Sequence[int] | np.ndarray,
    hi: Sequence[int] | np.ndarray,
    columns: Sequence[int] | np.ndarray,
    policy: Policy,
    note: str = "",
) -> Family | None:
    """The family of members with these sides, or None unless every side is one template
    (the first member's) with its hole filled."""
    first_b, first_a = with_hole(befores[0]), with_hole(afters[0])
    if first_b is None or first_a is None:
        return None
    sb: list[float] = []
    sa: list[float] = []
    for b, a in zip(befores, afters, strict=True):
        hb, ha = with_hole(b), with_hole(a)
        if hb is None or ha is None or hb[0] != first_b[0] or ha[0] != first_a[0]:
            return None
        sb.append(hb[1])
        sa.append(ha[1])
    return family(kind, var, first_b[0], first_a[0], sb, sa, lo, hi, columns, policy, note)


def prove_identities(
    fam: Family, store: ProofStore | None = None
) -> tuple[np.ndarray, Verdict | None]:
    """(which members are identities, the verdict proving them as one family), the verdict
    None when there are none. With a store, the identities' family is looked up: a record
    is served once re-decided (it must say proven with largest difference 0, else
    `StoreCorrupt`); a miss is recorded in rw mode, and in ro mode gives no identities (every
    member is then decided alone, against its own record, as before)."""
    t0 = time.perf_counter()
    same = fam.identities()
    if not same.any():
        return same, None
    proven = fam.subset(same)
    ms = (time.perf_counter() - t0) * 1000
    procedures = [{"name": "identity", "status": "holds", "time_ms": round(ms, 3)}]
    details: dict[str, Any] = {"members": len(proven), "procedures": procedures}
    v = Verdict(Status.PROVEN, fam.policy, proven.hash, "identity", ms, 0, details=details)
    if store is None:
        return same, v
    try:
        rec = store.lookup(proven)
    except StoreMiss:
        return np.zeros(len(fam), dtype=bool), None
    if rec is None:
        store.put(proven, v)
        return same, v
    if rec.verdict.status != Status.PROVEN or rec.verdict.max_diff != 0:
        raise StoreCorrupt(
            f"proof record {rec.path} says {rec.verdict.status} with largest difference "
            f"{rec.verdict.max_diff}, but every member of its family is an identity"
        )
    served = {**rec.verdict.details, "served": "re-decided by identity", "record": str(rec.path)}
    return same, Verdict(
        Status.PROVEN,
        fam.policy,
        proven.hash,
        rec.verdict.solver,
        ms,
        0,
        cached=True,
        details=served,
    )
