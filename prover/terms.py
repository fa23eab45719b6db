"""Terms: compositions of kernel primitives over named free integer variables.

A term is immutable and has a canonical JSON form, so equal terms hash equal
across runs and machines. `evaluate` interprets a term in any `Domain`
(concretely with numpy, symbolically with Z3) and collects the preconditions
its primitives impose.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii as _str_text
from operator import itemgetter
from typing import Any

import numpy as np

from .domain import NUMPY, Domain, KernelError, NumpyDomain
from .primitives import primitive


@dataclass(frozen=True)
class Var:
    """A free integer variable, e.g. the accumulator `acc` or an input element."""

    name: str


@dataclass(frozen=True)
class Const:
    value: int


@dataclass(frozen=True)
class Op:
    """`prim(*args, **params)` with params held as a sorted tuple of (key, value)."""

    prim: str
    args: tuple[Term, ...]
    params: tuple[tuple[str, Any], ...] = field(default=())

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.params)

    # The dataclass's own hash (of the fields' tuple), computed once per object: a term is
    # hashed again at every level of every dict or set it is looked up in. The memos of
    # derived values live in one instance-dict entry, `_memo` = [hash, free variables,
    # canonical text] (one entry costs less memory than three), never pickled or copied
    # (a str hash is per process).
    def __hash__(self) -> int:
        m = _memo(self)
        h = m[0]
        if h is None:
            h = m[0] = hash((self.prim, self.args, self.params))
        return h

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in _MEMO_KEYS}


# the instance-dict entry of an `Op`'s memos (see `Op.__hash__`, `free_vars`, `canonical_text`)
_MEMO_KEYS = frozenset({"_memo"})


def _memo(t: Op) -> list[Any]:
    """`t`'s memo entry [hash, free variables, canonical text], made on first use."""
    # an attribute, not `t.__dict__[...]`: asking for the instance dict makes CPython build
    # one (about 60 bytes more per term: per-channel sites hold hundreds of thousands)
    m = getattr(t, "_memo", None)
    if m is None:
        m = [None, None, None]
        object.__setattr__(t, "_memo", m)
    return m


Term = Var | Const | Op


class Table(tuple):
    """A parameter's tuple of ints (a lookup table's entries) whose hash is computed once.

    A term's hash covers its parameters, and a tuple's hash is not kept: every term holding
    a 256-entry table (one per column of a per-channel site) hashed all of it again. Equal
    to and hashed as the plain tuple; pickled as one."""

    def __hash__(self) -> int:
        d = self.__dict__
        h = d.get("h")
        if h is None:
            h = d["h"] = tuple.__hash__(self)
        return h

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (tuple(self),))


TABLE_MIN = 32  # int tuples this long are frozen as a `Table`
_PLAIN = frozenset({int, float, str, bool, type(None)})  # frozen as they are
_INT_ONLY = {int}  # the element types of a tuple of plain ints (bool is not one)


def _freeze(v: Any) -> Any:
    if type(v) in _PLAIN:  # most parameters: scales, zero points, type names
        return v
    if type(v) is Table:
        return v
    if isinstance(v, np.ndarray):
        if v.dtype.kind in "iu":
            return _ints(tuple(v.tolist()))
        return tuple(v.tolist())
    if isinstance(v, list | tuple):
        if v and set(map(type, v)) == _INT_ONLY:  # a table's entries: nothing to convert
            return _ints(v if type(v) is tuple else tuple(v))
        return tuple(_freeze(x) for x in v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def _ints(v: tuple[int, ...]) -> tuple[int, ...]:
    return Table(v) if len(v) >= TABLE_MIN else v


def op(prim: str, *args: Term, **params: Any) -> Op:
    """Build an `Op`, validating the primitive name and freezing parameter values."""
    primitive(prim)
    return Op(prim, tuple(args), tuple(sorted((k, _freeze(v)) for k, v in params.items())))


def to_json(t: Term) -> Any:
    """Canonical JSON-able form of a term."""
    if isinstance(t, Var):
        return {"var": t.name}
    if isinstance(t, Const):
        return {"const": int(t.value)}
    return {
        "op": t.prim,
        "args": [to_json(a) for a in t.args],
        "params": {k: (list(v) if isinstance(v, tuple) else v) for k, v in t.params},
    }


def from_json(j: Any) -> Term:
    """Inverse of `to_json`."""
    if "var" in j:
        return Var(j["var"])
    if "const" in j:
        return Const(int(j["const"]))
    return op(j["op"], *(from_json(a) for a in j["args"]), **j["params"])


# `json.dumps(obj, sort_keys=True, separators=(",", ":"))` builds this very encoder on
# every call; built once, its `encode` gives the same text.
_ENCODE = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def canonical(obj: Any) -> str:
    """Canonical JSON text (sorted keys, no spaces, floats as repr)."""
    return _ENCODE(obj)


def canonical_text(t: Term) -> str:
    """`canonical(to_json(t))`, built from its parts: an `Op`'s text is kept on the object
    when short (`_KEEP_MAX`: a subterm shared by many terms is encoded once) and a large
    table of ints, usually one object shared by every column's term, is encoded once per
    object (`_param_text`)."""
    if isinstance(t, Op):
        m = _memo(t)
        s = m[2]
        if s is None:
            s = _op_text(t)
            if len(s) <= _KEEP_MAX:
                m[2] = s
        return s
    if isinstance(t, Var):
        return '{"var":' + _leaf_text(t.name) + "}"
    if isinstance(t, Const):
        return '{"const":' + int.__repr__(int(t.value)) + "}"
    return canonical(to_json(t))


def _op_text(t: Op) -> str:
    params = t.params
    ks = [k for k, _ in params]
    if all(type(k) is str for k in ks) and len(set(ks)) == len(ks):
        ps = ",".join([_key_text(k) + ":" + _param_text(v) for k, v in sorted(params, key=_first)])
        ps = "{" + ps + "}"
    else:  # what a dict of these items encodes to (later duplicates win, keys sorted)
        ps = canonical(to_json(t)["params"])
    args = ",".join([canonical_text(a) for a in t.args])
    return '{"args":[' + args + '],"op":' + _leaf_text(t.prim) + ',"params":' + ps + "}"


def _first(kv: tuple[str, Any]) -> str:
    return kv[0]


def _key_text(k: str) -> str:
    s = _KEYS.get(k)
    if s is None:
        if len(_KEYS) >= _KEYS_MAX:
            _KEYS.clear()
        s = _KEYS[k] = _str_text(k)
    return s


# Longer texts are not kept on their op: a table's (kept once per table object, in `_INTS`)
# would be copied into every column's op text, about 1 kB per op, 60 MB of peak RSS on a
# large per-channel model; rebuilding it from its memoized pieces is one join.
_KEEP_MAX = 256

# parameter names (str) -> their JSON text
_KEYS: dict[str, str] = {}
_KEYS_MAX = 1024


def _leaf_text(v: Any) -> str:
    """`canonical(v)`, without the encoder's set-up for the common scalars (the same rules
    as the C encoder: an exact str, int, finite float, bool or None)."""
    tv = type(v)
    if tv is str:
        return _str_text(v)
    if tv is int:
        return int.__repr__(v)
    if tv is float and math.isfinite(v):
        return float.__repr__(v)
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    return _ENCODE(v)


# Encoded int tuples, by identity (the tuple is kept, so its id is not reused): at most
# `_INTS_MAX`, the oldest dropped first. Only tuples of at least `TABLE_MIN` plain ints.
_INTS: dict[int, tuple[tuple[int, ...], str]] = {}
_INTS_MAX = 256


def _param_text(v: Any) -> str:
    if (type(v) is tuple or type(v) is Table) and len(v) >= TABLE_MIN:
        hit = _INTS.get(id(v))
        if hit is not None and hit[0] is v:
            return hit[1]
        if type(v) is Table or set(map(type, v)) == _INT_ONLY:  # a Table holds plain ints
            s = int_seq_text(v)
            if len(_INTS) >= _INTS_MAX:
                del _INTS[next(iter(_INTS))]
            _INTS[id(v)] = (v, s)
            return s
        return _ENCODE(v)
    return _leaf_text(v)


def int_seq_text(v: Sequence[int]) -> str:
    """`canonical(v)` for a sequence of plain ints (each of type `int` itself: not a bool,
    whose text differs): the entries' texts are looked up for the small ints tables and
    weights hold (half the C encoder's time, which converts each), else the encoder's."""
    small = _SMALL_INTS or _small_ints()
    try:
        if len(v) > 1:  # one C call for all the look-ups (itemgetter of one key gives no tuple)
            return "[" + ",".join(itemgetter(*v)(small)) + "]"
        return "[" + ",".join(map(small.__getitem__, v)) + "]"
    except KeyError:  # an entry outside the small ints
        return _ENCODE(v)


# int -> its JSON text, for -SMALL_INT <= int < SMALL_INT (built on first use)
_SMALL_INTS: dict[int, str] = {}
SMALL_INT = 1024


def _small_ints() -> dict[int, str]:
    if not _SMALL_INTS:
        _SMALL_INTS.update((i, int.__repr__(i)) for i in range(-SMALL_INT, SMALL_INT))
    return _SMALL_INTS


def term_hash(t: Term) -> str:
    return hashlib.sha256(canonical_text(t).encode()).hexdigest()


def free_vars(t: Term) -> set[str]:
    if isinstance(t, Var):
        return {t.name}
    if isinstance(t, Const):
        return set()
    return set(_op_free_vars(t))


def _op_free_vars(t: Op) -> frozenset[str]:
    m = _memo(t)
    fv = m[1]
    if fv is None:
        out: set[str] = set()
        for a in t.args:
            if isinstance(a, Var):
                out.add(a.name)
            elif not isinstance(a, Const):
                out |= _op_free_vars(a)
        fv = frozenset(out)
        fv = _FREE_SETS.setdefault(fv, fv)  # one object per distinct set (most are {"acc"})
        if len(_FREE_SETS) > 4096:
            _FREE_SETS.clear()
        m[1] = fv
    return fv


_FREE_SETS: dict[frozenset[str], frozenset[str]] = {}


class PreconditionViolation(KernelError):
    """A primitive was applied where its precondition fails: the result is undefined."""


def evaluate(
    t: Term,
    d: Domain,
    env: Mapping[str, Any],
    preconds: list | None = None,
    *,
    strict: bool | None = None,
) -> Any:
    """Interpret `t` in domain `d` with variables bound by `env`.

    Preconditions of the primitives met on the way are appended to `preconds`
    (when given) as domain booleans; the caller decides what they mean (see
    `primitives`: a side's preconditions are assumed for the reference and
    are obligations for the implementation), and values computed where one
    fails mean nothing. Strict evaluation (the default for a concrete domain
    when `preconds` is not given) raises `PreconditionViolation` where a
    precondition fails instead of computing an undefined value: the NPU
    simulator, host kernels and constant folding never see such a value.
    """
    if strict is None:
        strict = preconds is None and isinstance(d, NumpyDomain)
    # The memo is local to this call and not referenced by any closure, so its arrays
    # are freed as soon as the call returns (a self-referencing inner function kept it
    # alive in a reference cycle until the garbage collector ran).
    return _Evaluation(d, env, preconds, strict).go(t)


class _Evaluation:
    """One `evaluate` call: shared subterms are computed once (memo keyed by identity)."""

    __slots__ = ("d", "env", "preconds", "strict", "memo", "pre")

    def __init__(self, d: Domain, env: Mapping[str, Any], preconds: list | None, strict: bool):
        self.d, self.env, self.preconds, self.strict = d, env, preconds, strict
        self.memo: dict[Any, Any] = {}
        self.pre: dict[Any, Any] = {}  # per node key: its precondition (evaluate_shared)

    def go(self, u: Term) -> Any:
        memo = self.memo
        key = u if isinstance(memo, _StructuralMemo) else id(u)
        if key in memo:
            return memo[key]
        d = self.d
        if isinstance(u, Var):
            if u.name not in self.env:
                raise KernelError(f"variable {u.name!r} is not bound")
            val = self.env[u.name]
        elif isinstance(u, Const):
            val = d.const(u.value)
        else:
            p = primitive(u.prim)
            args = [self.go(a) for a in u.args]
            kw = u.kwargs
            preconds, strict = self.preconds, self.strict
            if p.precondition is not None and (preconds is not None or strict):
                ok = p.precondition(d, *args, **kw)
                if preconds is not None:
                    preconds.append(ok)
                    self.pre[key] = ok
                if strict and not bool(np.all(ok)):
                    raise PreconditionViolation(_violation_text(u, p, args, ok))
            val = p.fn(d, *args, **kw)
        memo[key] = val
        return val


def evaluate_shared(
    ts: Sequence[Term],
    d: Domain,
    env: Mapping[str, Any],
    known: Mapping[Term, tuple[Any, Any]] | None = None,
) -> tuple[list, list]:
    """Evaluate several terms (e.g. both sides of an obligation) sharing equal subterms.

    Equal subterms are computed once across all of `ts` (the before and after sides of
    a rewrite usually share the requantizer). Returns the values and, per term, the
    preconditions of every primitive in that term (as `evaluate` collects them), so a
    shared subterm's precondition counts for each side that contains it. `known` maps a
    subterm to its value and the conjunction of its primitives' preconditions, computed
    by the caller (`segments` reads a monotone chain's from its steps): it is not
    evaluated, and that conjunction stands for its preconditions.
    """
    ev = _Evaluation(d, env, [], False)
    ev.memo = _StructuralMemo()
    for u, (val, ok) in (known or {}).items():
        ev.memo[u] = val
        ev.pre[u] = ok
    values = [ev.go(t) for t in ts]
    pre = ev.pre
    return values, [[pre[n] for n in _nodes_with_pre(t, pre)] for t in ts]


class _StructuralMemo(dict):
    """A memo keyed by the term itself (structural equality) instead of its identity."""


def _nodes_with_pre(t: Term, pre: dict) -> list:
    seen: dict = {}
    stack = [t]
    while stack:
        u = stack.pop()
        if isinstance(u, Op) and u not in seen:
            seen[u] = None
            stack.extend(u.args)
    return [u for u in seen if u in pre]


def _violation_text(u: Op, p: Any, args: list, ok: Any) -> str:
    okv = np.atleast_1d(np.asarray(ok, dtype=bool))
    arrs = [np.atleast_1d(np.asarray(a, dtype=np.int64)) for a in args]
    shape = np.broadcast_shapes(okv.shape, *(a.shape for a in arrs))
    i = int(np.flatnonzero(~np.broadcast_to(okv, shape))[0])
    first = ", ".join(str(int(np.broadcast_to(a, shape).reshape(-1)[i])) for a in arrs)
    params = ", ".join(f"{k}={v}" for k, v in u.params if not isinstance(v, tuple))
    return (
        f"{u.prim}({params}): precondition '{p.requires}' fails at input {first} "
        "(out of range); the result is undefined"
    )


def first_violation(t: Term, env: Mapping[str, int]) -> str | None:
    """At one concrete point: a description of the first failing precondition in `t`, else None."""
    point = {k: np.array([int(v)], dtype=np.int64) for k, v in env.items()}
    try:
        with np.errstate(all="ignore"):
            evaluate(t, NUMPY, point, strict=True)
    except PreconditionViolation as e:
        return str(e)
    return None
