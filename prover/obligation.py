"""Proof obligations: `before` and `after` terms over ranged free variables, with a policy.

An obligation's identity is the sha256 of its canonical JSON (`to_json`), so
the same obligation hashes the same across runs and machines; the proof store
is keyed by it. `before`/`after` are one term each, or tuples of terms of the
same length (several outputs, e.g. the coordinates of an index map); the policy
applies to every output.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from json.encoder import encode_basestring_ascii as _str_text
from typing import Any

import numpy as np

from . import terms as T
from .inttypes import int_type
from .policy import Policy
from .primitives import SEMANTICS_VERSION

KINDS = ("epilogue", "lowering", "index_map", "table", "accumulation", "other")


@dataclass(frozen=True)
class LiftSpec:
    """How the free variable `var` is produced by the compute op.

    `var = sum_k (x_k - x_zp) * (weights_k - w_zp) + bias` with every `x_k` of
    `x_type`: one input row dotted with one constant weights column.
    """

    var: str
    weights: tuple[int, ...]
    w_zp: int = 0
    x_zp: int = 0
    x_type: str = "int8"
    bias: int = 0

    def __post_init__(self) -> None:
        w = self.weights
        if isinstance(w, np.ndarray) and w.dtype.kind in "iu":  # tolist: Python ints, at C speed
            object.__setattr__(self, "weights", tuple(w.tolist()))
        elif not (type(w) is tuple and all(type(v) is int for v in w)):
            object.__setattr__(self, "weights", tuple(int(v) for v in w))
        for k in ("w_zp", "x_zp", "bias"):
            object.__setattr__(self, k, int(getattr(self, k)))
        if not self.weights:
            raise ValueError("LiftSpec needs at least one weight")
        int_type(self.x_type)

    @cached_property
    def weights_array(self) -> np.ndarray:
        """`weights` as a read-only int64 array, made once (a column of 4096 Python ints
        took 0.15 ms to convert, twice per lifted counterexample)."""
        a = np.asarray(self.weights, dtype=np.int64)
        a.flags.writeable = False
        return a

    def to_json(self) -> dict[str, Any]:
        return {
            "var": self.var,
            "weights": list(self.weights),
            "w_zp": self.w_zp,
            "x_zp": self.x_zp,
            "x_type": self.x_type,
            "bias": self.bias,
        }

    @classmethod
    def from_json(cls, j: Mapping[str, Any]) -> LiftSpec:
        return cls(j["var"], tuple(j["weights"]), j["w_zp"], j["x_zp"], j["x_type"], j["bias"])


def _lift_text(lift: LiftSpec) -> str:
    """`T.canonical(lift.to_json())`, the weights' text built by `terms.int_seq_text`
    (`LiftSpec` holds them as plain ints); the same text, byte for byte."""
    if type(lift).to_json is not LiftSpec.to_json or not (
        type(lift.var) is str and type(lift.x_type) is str
    ):
        return T.canonical(lift.to_json())
    # __post_init__ made the weights, w_zp, x_zp and bias plain ints (no bools)
    return (
        f'{{"bias":{int.__repr__(lift.bias)},"var":{_str_text(lift.var)},'
        f'"w_zp":{int.__repr__(lift.w_zp)},"weights":{T.int_seq_text(lift.weights)},'
        f'"x_type":{_str_text(lift.x_type)},"x_zp":{int.__repr__(lift.x_zp)}}}'
    )


def _outputs(t: Any) -> tuple[T.Term, ...]:
    if isinstance(t, T.Var | T.Const | T.Op):
        return (t,)
    if isinstance(t, tuple | list) and t and all(isinstance(u, T.Var | T.Const | T.Op) for u in t):
        return tuple(t)
    raise ValueError(f"before/after must be a term or a non-empty tuple of terms, got {t!r}")


@dataclass(frozen=True)
class Obligation:
    """`before` equals `after` under `policy` for every assignment of the ranged variables."""

    kind: str
    before: Any
    after: Any
    ranges: Mapping[str, tuple[int, int]]
    policy: Policy = field(default_factory=Policy)
    lift: LiftSpec | None = None
    note: str = ""  # free text for humans; not part of the hash

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown obligation kind {self.kind!r}; known: {KINDS}")
        if isinstance(self.policy, str):
            object.__setattr__(self, "policy", Policy.parse(self.policy))
        b, a = _outputs(self.before), _outputs(self.after)
        if len(b) != len(a):
            raise ValueError(f"before has {len(b)} outputs, after has {len(a)}")
        rng = {}
        for name, r in dict(self.ranges).items():
            lo, hi = (int(r[0]), int(r[1]))
            rng[str(name)] = (lo, hi)
        object.__setattr__(self, "ranges", dict(sorted(rng.items())))
        used = set().union(*(T.free_vars(t) for t in b + a))
        missing = used - set(rng)
        if missing:
            raise ValueError(f"free variables without a range: {sorted(missing)}")
        if self.lift is not None and self.lift.var not in rng:
            raise ValueError(f"lift variable {self.lift.var!r} has no range")

    @property
    def outputs_before(self) -> tuple[T.Term, ...]:
        return _outputs(self.before)

    @property
    def outputs_after(self) -> tuple[T.Term, ...]:
        return _outputs(self.after)

    @property
    def variables(self) -> tuple[str, ...]:
        """Free variables in canonical (sorted) order."""
        return tuple(self.ranges)

    @property
    def domain_size(self) -> int:
        n = 1
        for lo, hi in self.ranges.values():
            n *= max(0, hi - lo + 1)
        return n

    def to_json(self) -> dict[str, Any]:
        """Canonical JSON-able form (everything that determines the verdict)."""
        return {
            "kind": self.kind,
            "before": [T.to_json(t) for t in self.outputs_before],
            "after": [T.to_json(t) for t in self.outputs_after],
            "ranges": {k: [lo, hi] for k, (lo, hi) in self.ranges.items()},
            "policy": str(self.policy),
            "lift": None if self.lift is None else self.lift.to_json(),
            "semantics": SEMANTICS_VERSION,
        }

    @classmethod
    def from_json(cls, j: Mapping[str, Any]) -> Obligation:
        if j.get("semantics") != SEMANTICS_VERSION:
            raise ValueError(
                f"obligation made under kernel semantics {j.get('semantics')!r}; "
                f"this kernel is {SEMANTICS_VERSION!r}"
            )
        before = tuple(T.from_json(t) for t in j["before"])
        after = tuple(T.from_json(t) for t in j["after"])
        return cls(
            kind=j["kind"],
            before=before[0] if len(before) == 1 else before,
            after=after[0] if len(after) == 1 else after,
            ranges={k: (v[0], v[1]) for k, v in j["ranges"].items()},
            policy=Policy.parse(j["policy"]),
            lift=None if j.get("lift") is None else LiftSpec.from_json(j["lift"]),
        )

    def __hash__(self) -> int:
        return hash(self.hash)

    @cached_property
    def canonical(self) -> str:
        """`T.canonical(self.to_json())`, built from the terms' memoized texts
        (`terms.canonical_text`); the same text, byte for byte."""
        if type(self).to_json is not Obligation.to_json:
            return T.canonical(self.to_json())
        enc = T.canonical
        before = ",".join([T.canonical_text(t) for t in self.outputs_before])
        after = ",".join([T.canonical_text(t) for t in self.outputs_after])
        ranges = enc({k: [lo, hi] for k, (lo, hi) in self.ranges.items()})
        lift = "null" if self.lift is None else _lift_text(self.lift)
        return (
            f'{{"after":[{after}],"before":[{before}],"kind":{enc(self.kind)},"lift":{lift},'
            f'"policy":{enc(str(self.policy))},"ranges":{ranges},"semantics":{enc(SEMANTICS_VERSION)}}}'
        )

    @cached_property
    def hash(self) -> str:
        """Stable sha256 hex digest of the canonical JSON."""
        return hashlib.sha256(self.canonical.encode()).hexdigest()

    def with_policy(self, policy: Policy | str) -> Obligation:
        p = Policy.parse(policy) if isinstance(policy, str) else policy
        return Obligation(self.kind, self.before, self.after, self.ranges, p, self.lift, self.note)
