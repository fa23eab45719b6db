"""The fused MatMul epilogue: requantize, optional clip, optional LUT, output encoding.

A `PostProcess` is data; its one meaning is `epilogue_term(acc)`, a term over
kernel primitives (`prover.terms.op`). The prover checks that term; the
simulator evaluates the very same term with `prover.domain.NUMPY` (`apply`).

Order of the stages (what the hardware postprocessor does per element):

    acc (int32) -> requantize to the intermediate type -> [add] -> clip -> LUT -> output

The optional `add` stage (targets whose postprocessor lists "requantized" in `bias`) is a
second rounding after the requantization: ONNX Runtime's QLinearAdd of the requantized
value with a constant (a quantized bias), computed in float32 as MLAS does it.

Per-channel parameters: a `PostProcess` holds scalar parameters only. A
per-channel epilogue is a tuple of `PostProcess`, one per output column (the
last axis of the MatMul output), or a `ColumnPosts` (columns alike but for their
float32 scale, held as one post and the scales); `apply_columns` evaluates either.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from operator import attrgetter
from typing import Any, NamedTuple, TypeGuard, overload

import numpy as np

from prover.by_identity import ByIdentity
from prover.domain import NUMPY, KernelError
from prover.eltwise import EltwiseParams
from prover.inttypes import int_type
from prover.lut import LutSpec
from prover.qlinear_binary import qladd_kernel
from prover.requant import check_multiplier, requant_float_concrete
from prover.terms import Op, PreconditionViolation, Term, Var, evaluate, op

REQUANT_SCHEMES = ("float32", "fixed_double", "fixed_single")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


_SET = object.__setattr__


def _copies(obj: Any, names: tuple[str, ...], field: str, values: Iterable[Any]) -> list[Any]:
    """Copies of the frozen dataclass instance `obj` (fields `names`, in order), `field`
    taking each of `values`: made without the constructor but laid out as it lays them out
    (each field set in order, no instance dict made: about 145 bytes a copy, not 340)."""
    i = names.index(field)
    before = [(f, getattr(obj, f)) for f in names[:i]]
    after = [(f, getattr(obj, f)) for f in names[i + 1 :]]
    cls, new = type(obj), object.__new__
    out = []
    for v in values:
        n = new(cls)
        for f, x in before:
            _SET(n, f, x)
        _SET(n, field, v)
        for f, x in after:
            _SET(n, f, x)
        out.append(n)
    return out


@dataclass(frozen=True)
class RequantParams:
    """Requantization of an int32 accumulator to `out_type` (the intermediate storage type).

    scheme "float32": `scale` (a float32 value) is used, as ONNX Runtime does;
    scheme "fixed_double" / "fixed_single": `multiplier` (int32) and `shift` are used
    (gemmlowp double rounding / TFLite single rounding). `zp` is added after scaling.
    """

    scheme: str
    zp: int
    out_type: str
    scale: float | None = None
    multiplier: int | None = None
    shift: int | None = None

    def __hash__(self) -> int:
        """The dataclass's hash (of the fields), computed once: a per-channel op's columns
        each have one, hashed with their post wherever that is a key (codegen's parameter
        records, of copies sharing it). Not pickled or copied (a str hash is per process)."""
        h = getattr(self, "_hash", None)  # not `self.__dict__`: see `prover.terms._memo`
        if h is None:
            h = hash((self.scheme, self.zp, self.out_type, self.scale, self.multiplier,
                      self.shift))  # fmt: skip
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def term(self, x: Term) -> Term:
        """The requantization as a kernel term over `x`."""
        if self.scheme == "float32":
            return op(
                "requant_float", x, scale=float(self._scale()), zp=int(self.zp), out=self.out_type
            )
        prim = {"fixed_double": "requant_double", "fixed_single": "requant_single"}[self.scheme]
        multiplier, shift = self._fixed()
        return op(
            prim,
            x,
            multiplier=int(multiplier),
            shift=int(shift),
            zp=int(self.zp),
            out=self.out_type,
        )

    def with_scales(self, scales: Iterable[float]) -> list[RequantParams]:
        """`[dataclasses.replace(self, scale=s) for s in scales]`, made at once without the
        constructor (a per-channel op has thousands of columns)."""
        return _copies(self, _RQ_FIELDS, "scale", scales)

    def _scale(self) -> float:
        if self.scale is None:
            raise KernelError(f"requantization scheme {self.scheme!r} needs a scale")
        return self.scale

    def _fixed(self) -> tuple[int, int]:
        if self.multiplier is None or self.shift is None:
            raise KernelError(f"requantization scheme {self.scheme!r} needs multiplier and shift")
        return self.multiplier, self.shift

    def check(self) -> None:
        """Raise `KernelError` unless the parameters are complete and valid for the scheme."""
        if self.scheme not in REQUANT_SCHEMES:
            raise KernelError(f"unknown requantization scheme {self.scheme!r}")
        out = int_type(self.out_type)
        if not out.contains(int(self.zp)):
            raise KernelError(f"zero point {self.zp} outside {out.name}")
        if self.scheme == "float32":
            s = float(np.float32(self.scale))
            if not (np.isfinite(s) and s > 0):
                raise KernelError(f"scale {self.scale} must be finite and positive in float32")
        else:
            multiplier, shift = self._fixed()
            check_multiplier(multiplier, shift, single_rounding=self.scheme == "fixed_single")

    def to_json(self) -> dict[str, Any]:
        return {
            "scheme": self.scheme,
            "zp": int(self.zp),
            "out_type": self.out_type,
            "scale": None if self.scale is None else float(self.scale),
            "multiplier": None if self.multiplier is None else int(self.multiplier),
            "shift": None if self.shift is None else int(self.shift),
        }

    @staticmethod
    def from_json(j: dict[str, Any]) -> RequantParams:
        return RequantParams(**j)


@dataclass(frozen=True)
class LutParams:
    """A 256-entry (one per `in_type` value) table in physical `index_order`.

    `table` entries are already in `out_type` (the LUT builder folded the output
    scale and zero point in). `spec` optionally records how the table was built.
    Fields are Optional only so validation can report an incomplete LUT.
    """

    table: tuple[int, ...] | None
    in_type: str | None
    out_type: str | None
    index_order: str | None = "offset"
    spec: LutSpec | None = None

    def __hash__(self) -> int:
        """The dataclass's hash (of the fields), computed once: per-channel columns'
        postprocessing share one LutParams and are hashed in sets and caches often. Not
        pickled or copied (a str hash is per process)."""
        h = getattr(self, "_hash", None)  # not `self.__dict__`: see `prover.terms._memo`
        if h is None:
            h = hash((self.table, self.in_type, self.out_type, self.index_order, self.spec))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def term(self, x: Term) -> Term:
        """`lut(x)` with this table; its frozen parameters are built once per LutParams."""
        return Op("lut", (x,), self._lut_params)

    @cached_property
    def _lut_params(self) -> tuple[tuple[str, Any], ...]:
        t = op(
            "lut", Var("x"), table=self.table, in_type=self.in_type, index_order=self.index_order
        )
        return t.params

    def to_json(self, table: bool = True) -> dict[str, Any]:
        """JSON-able fields; `table=False` leaves the table's entries out (None), for a
        writer that names the table elsewhere."""
        return {
            "table": None if self.table is None or not table else [int(v) for v in self.table],
            "in_type": self.in_type,
            "out_type": self.out_type,
            "index_order": self.index_order,
            "spec": None if self.spec is None else dict(self.spec.__dict__),
        }

    @staticmethod
    def from_json(j: dict[str, Any]) -> LutParams:
        return LutParams(
            table=None if j["table"] is None else tuple(int(v) for v in j["table"]),
            in_type=j["in_type"],
            out_type=j["out_type"],
            index_order=j["index_order"],
            spec=None if j.get("spec") is None else LutSpec(**j["spec"]),
        )


@dataclass(frozen=True, kw_only=True)
class AddParams:
    """The post-requantization add stage: QLinearAdd(x, const) in float32, MLAS's formula.

    `x` (the requantized value, `type`) and the constant `const` (same type) are the
    kernel's span operand `p` and other operand `q` (`x_is_p` says which is x); scales and
    zero points travel with their operand; `c_scale`/`c_zp` encode the output. `fma`: the
    hardware evaluates the fused multiply-adds of MLAS's AVX2/FMA kernel (else separate
    float32 operations, its SSE2 order). The stage is a function of one `type` value, so
    its term is that function's table (computed by the very same float32 arithmetic).
    """

    type: str
    x_scale: float
    x_zp: int
    const: int
    const_scale: float
    const_zp: int
    c_scale: float
    c_zp: int
    x_is_p: bool = True
    q_scalar: bool = True
    fma: bool = True
    const_type: str | None = None  # the constant's own 8-bit type (default `type`)

    def table(self) -> tuple[int, ...]:
        """The stage's value for every `type` input, in offset order (index x - min);
        computed once per distinct stage (`_add_table`)."""
        return _add_table(self)

    def _compute_table(self) -> tuple[int, ...]:
        t = int_type(self.type)
        xs = np.arange(t.min, t.max + 1, dtype=np.int64)
        c = np.full(xs.shape, int(self.const), dtype=np.int64)
        xp = (xs, float(self.x_scale), int(self.x_zp))
        cq = (c, float(self.const_scale), int(self.const_zp))
        (p, ps, pz), (q, qs, qz) = (xp, cq) if self.x_is_p else (cq, xp)
        v = qladd_kernel(
            p, q, ps, pz, qs, qz, float(self.c_scale), int(self.c_zp), t,
            q_scalar=self.q_scalar, fma=self.fma,
        )  # fmt: skip
        return tuple(np.asarray(v, dtype=np.int64).tolist())

    def term(self, x: Term) -> Term:
        return op("lut", x, table=self.table(), in_type=self.type, index_order="offset")

    def check(self) -> None:
        """Raise `KernelError` unless scales are positive finite float32 and zps fit `type`."""
        t = int_type(self.type)
        ct = int_type(self.const_type or self.type)
        for name, ty in (("x_zp", t), ("const", ct), ("const_zp", ct), ("c_zp", t)):
            if not ty.contains(int(getattr(self, name))):
                raise KernelError(f"add stage {name} {getattr(self, name)} outside {ty.name}")
        for name in ("x_scale", "const_scale", "c_scale"):
            s = float(np.float32(getattr(self, name)))
            if not (np.isfinite(s) and s > 0):
                raise KernelError(f"add stage {name} {getattr(self, name)} must be positive")

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @staticmethod
    def from_json(j: dict[str, Any]) -> AddParams:
        return AddParams(**j)


@lru_cache(maxsize=4096)
def _add_table(stage: AddParams) -> tuple[int, ...]:
    """`stage`'s table, once per distinct stage: a per-channel site asks for each column's
    in its obligations, its validation and its program (bert qop pc: 529 requests for 169
    stages in a compile, each a float32 QLinearAdd of 256 values)."""
    return stage._compute_table()


@dataclass(frozen=True)
class PostProcess:
    """Descriptor of a MatMul's fused postprocessing (scalar parameters; see module doc).

    - `requant`: requantization to the intermediate type (`requant.out_type`);
    - `add`: optional post-requantization add stage (`AddParams`, same type in and out);
    - `clip`: optional (lo, hi) clamp applied to the intermediate integers;
    - `function` + `lut`: the fused activation kind (e.g. "sigmoid") and its table;
      both present or both absent (validation reports the other states);
    - `out_type`, `out_zp`: the final output encoding (the table's output type and the
      output tensor's zero point; without a LUT they equal the requantization's).
    """

    requant: RequantParams
    clip: tuple[int, int] | None = None
    function: str | None = None
    lut: LutParams | None = None
    out_type: str | None = None
    out_zp: int | None = None
    add: AddParams | None = None

    def __hash__(self) -> int:
        """The dataclass's hash (of the fields), computed once: a per-channel epilogue is a
        tuple of thousands, hashed whole wherever it is a key (codegen's parameter records,
        the simulator's column groups). Not pickled or copied (a str hash is per process)."""
        h = getattr(self, "_hash", None)  # not `self.__dict__`: see `prover.terms._memo`
        if h is None:
            h = hash((self.requant, self.clip, self.function, self.lut, self.out_type,
                      self.out_zp, self.add))  # fmt: skip
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @property
    def intermediate_type(self) -> str:
        return self.requant.out_type

    @property
    def output_type(self) -> str:
        """The final output type (explicit, else the LUT's, else the intermediate type)."""
        if self.out_type is not None:
            return self.out_type
        if self.lut is not None and self.lut.out_type is not None:
            return self.lut.out_type
        return self.requant.out_type

    @property
    def output_zp(self) -> int | None:
        """Explicit `out_zp`; else the LUT builder's output zero point; else the requant's.

        None when a LUT without a build spec leaves the output encoding unknown.
        """
        if self.out_zp is not None:
            return int(self.out_zp)
        if self.lut is not None:
            return None if self.lut.spec is None else int(self.lut.spec.out_zp)
        return int(self.requant.zp if self.add is None else self.add.c_zp)

    def epilogue_term(self, acc: Term) -> Term:
        """The fused semantics over the accumulator term `acc` (what the prover checks)."""
        return self.tail_term(self.requant.term(acc))

    def tail_term(self, q: Term) -> Term:
        """The stages after requantization (add, clip, table) over the requantized `q`."""
        return tail_term(self.add, self.clip, self.lut, q)

    def apply(self, acc: Any) -> np.ndarray:
        """Evaluate `epilogue_term` concretely (NUMPY domain) on int accumulators."""
        term = _acc_term(self)
        return np.asarray(evaluate(term, NUMPY, {"acc": np.asarray(acc, dtype=np.int64)}))

    def copy_with(self, **changes: Any) -> PostProcess:
        """`dataclasses.replace(self, **changes)` without the constructor: a copy of the
        fields with `changes` (a per-channel op makes thousands; the class has no
        `__post_init__` to skip, and the copy computes its own hash)."""
        if not changes.keys() <= _FIELD_SET:
            raise TypeError(f"PostProcess has no field {sorted(changes.keys() - _FIELD_SET)[0]!r}")
        new = object.__new__(PostProcess)
        for f in _FIELDS:
            _SET(new, f, getattr(self, f))
        for k, v in changes.items():  # set again: the fields keep their order
            _SET(new, k, v)
        return new

    def with_lut(self, lut: LutParams | None) -> PostProcess:
        """`dataclasses.replace(self, lut=lut)`, by the constructor's positional form (a
        per-channel op's records copy thousands)."""
        return PostProcess(
            self.requant, self.clip, self.function, lut, self.out_type, self.out_zp, self.add
        )

    def with_requants(self, requants: Iterable[RequantParams]) -> list[PostProcess]:
        """`[self.copy_with(requant=rq) for rq in requants]`, made at once (a per-channel
        op's columns differ only in their requantization)."""
        return _copies(self, _FIELDS, "requant", requants)

    def without_lut(self) -> PostProcess:
        """The requantize (+add +clip) part alone: the unfused MatMul's epilogue."""
        return PostProcess(self.requant, self.clip, None, None, None, None, self.add)

    def requant_only(self) -> PostProcess:
        """The requantization alone (a MatMul whose add, clip and table run as separate ops)."""
        return PostProcess(requant=self.requant)

    def to_json(
        self, lut_json: Callable[[LutParams], dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """JSON-able fields; `lut_json` writes the LUT (default `LutParams.to_json`)."""
        lut = None if self.lut is None else (lut_json or LutParams.to_json)(self.lut)
        return {
            "requant": self.requant.to_json(),
            "clip": None if self.clip is None else [int(self.clip[0]), int(self.clip[1])],
            "function": self.function,
            "lut": lut,
            "out_type": self.out_type,
            "out_zp": None if self.out_zp is None else int(self.out_zp),
            "add": None if self.add is None else self.add.to_json(),
        }

    @staticmethod
    def from_json(j: dict[str, Any]) -> PostProcess:
        return PostProcess(
            requant=RequantParams.from_json(j["requant"]),
            clip=None if j["clip"] is None else (int(j["clip"][0]), int(j["clip"][1])),
            function=j["function"],
            lut=None if j["lut"] is None else LutParams.from_json(j["lut"]),
            out_type=j["out_type"],
            out_zp=j["out_zp"],
            add=None if j.get("add") is None else AddParams.from_json(j["add"]),
        )


@lru_cache(maxsize=4096)
def _acc_term(post: PostProcess) -> Term:
    # building the term is most of a simulated MatMul's time; a batched run repeats it per row
    return post.epilogue_term(Var("acc"))


_FIELDS = tuple(f.name for f in dataclasses.fields(PostProcess))
if _FIELDS != ("requant", "clip", "function", "lut", "out_type", "out_zp", "add"):
    raise ImportError("PostProcess.with_lut/without_lut call the constructor in another order")
_FIELD_SET = frozenset(_FIELDS)
_RQ_FIELDS = tuple(f.name for f in dataclasses.fields(RequantParams))

# what `ColumnPosts` columns share: all of a PostProcess but its requantization's scale
_POST_REST = attrgetter(*(f for f in _FIELDS if f != "requant"))
_REQUANT_REST = attrgetter(*(f for f in _RQ_FIELDS if f != "scale"))


class ColumnPosts(Sequence[PostProcess]):
    """A per-channel epilogue whose columns are `first` but for their float32 requantizer's
    scale: column j's postprocessing is `first` with scale `scales[j]` (a per-channel op's
    columns as `build_columns` makes them).

    It is the tuple of those posts: equal to it, hashed as it, read as it (columns of one
    scale share one post). The posts are made only when one is first read, all at once;
    the readers that know this form (validation, the simulator's plan, codegen's records,
    the program file, the ledger's unfused form) read `first` and the scales instead, so a
    check of a model with tens of thousands of columns makes none."""

    __slots__ = ("first", "scales", "_items", "_hash")

    def __init__(self, first: PostProcess, scales: Sequence[float]) -> None:
        if first.requant.scheme != "float32" or not len(scales):
            raise ValueError("ColumnPosts holds float32 requantizers of one or more columns")
        self.first = first
        self.scales: tuple[float, ...] = tuple(scales)
        self._items: tuple[PostProcess, ...] | None = None
        self._hash: int | None = None

    def items(self) -> tuple[PostProcess, ...]:
        """The posts, one per column (made on the first call)."""
        if self._items is None:
            first = self.first
            # by the scale's bits: 0.0 and -0.0 (both invalid, reported as given) stay apart
            made: dict[tuple[float, bool], PostProcess] = {}
            keys = [(s, math.copysign(1.0, s) < 0) for s in self.scales]
            own = first.requant.scale
            if own is not None:
                made[(own, math.copysign(1.0, own) < 0)] = first
            rest = [k for k in dict.fromkeys(keys) if k not in made]
            rqs = first.requant.with_scales(s for s, _ in rest)
            made.update(zip(rest, first.with_requants(rqs), strict=True))
            self._items = tuple(map(made.__getitem__, keys))
        return self._items

    def requants_valid(self) -> bool:
        """`float32_requants_valid` of every column's requantizer, from the scales at once."""
        if not float32_requants_valid([self.first.requant]):
            return False
        with np.errstate(over="ignore", invalid="ignore"):
            s = np.asarray(self.scales, dtype=np.float32)
        return bool((np.isfinite(s) & (s > 0)).all())

    def distinct_count(self) -> int:
        """How many distinct posts `items()` holds (one per distinct scale)."""
        if self._items is not None:
            return len({id(p) for p in self._items})
        values = set(self.scales)  # 0.0 == -0.0: told apart only where a zero is there
        if 0.0 not in values:
            return len(values)
        return len({(s, math.copysign(1.0, s) < 0) for s in self.scales})

    def float32_scales(self) -> np.ndarray:
        """The columns' scales as float32 (the requantizer's own values)."""
        return np.asarray(self.scales, dtype=np.float64).astype(np.float32)

    def post(self, j: int) -> PostProcess:
        """Column j's post, made alone where the posts are not made."""
        if self._items is not None:
            return self._items[j]
        s, own = self.scales[j], self.first.requant.scale
        if own is not None and (s, math.copysign(1.0, s)) == (own, math.copysign(1.0, own)):
            return self.first
        return self.first.with_requants(self.first.requant.with_scales([s]))[0]

    def columns(self, n0: int, n1: int) -> ColumnPosts:
        """Columns [n0, n1) alone."""
        return ColumnPosts(self.first, self.scales[n0:n1])

    def key(self) -> tuple[Any, ...]:
        """`alike_key`'s key of these columns (hashed without making the posts)."""
        return _alike_key(self.first, self.scales)

    def like(self, first: PostProcess) -> ColumnPosts:
        """These columns' scales over another `first` (its own scale is replaced)."""
        return ColumnPosts(first, self.scales)

    def __len__(self) -> int:
        return len(self.scales)

    @overload
    def __getitem__(self, i: int) -> PostProcess: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[PostProcess, ...]: ...
    def __getitem__(self, i: int | slice) -> PostProcess | tuple[PostProcess, ...]:
        return self.items()[i]

    def __iter__(self) -> Iterator[PostProcess]:
        return iter(self.items())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ColumnPosts):
            return self.scales == other.scales and same_but_scale(self.first, other.first)
        if isinstance(other, tuple):  # by value, without making these posts
            return len(other) == len(self.scales) and alike_key(other) == self.key()
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self.items())
        return self._hash

    def __repr__(self) -> str:
        return f"ColumnPosts({self.first!r}, <{len(self.scales)} scales>)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (ColumnPosts, (self.first, self.scales))


Post = PostProcess | tuple[PostProcess, ...] | ColumnPosts
"""A MatMul's epilogue: one `PostProcess` (per-tensor) or one per output column (a tuple,
or a `ColumnPosts`)."""


def post_rest(p: PostProcess) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """All of `p` but its requantization's scale: its other fields, its requantizer's other
    fields (what columns alike but for their scale share)."""
    return _POST_REST(p), _REQUANT_REST(p.requant)


def same_but_scale(a: PostProcess, b: PostProcess) -> bool:
    """Whether `a` and `b` are equal but for their requantization's scale."""
    return post_rest(a) == post_rest(b)


def _alike_key(first: PostProcess, scales: tuple[Any, ...]) -> tuple[Any, ...]:
    return ("columns", post_rest(first), scales)


def alike_key(posts: Sequence[PostProcess]) -> tuple[Any, ...] | None:
    """A key of a per-column epilogue whose columns are the first one's but for their
    requantization's scale (by value), equal for equal epilogues whatever their form (a
    tuple or a `ColumnPosts`); None for a tuple whose columns differ otherwise."""
    if isinstance(posts, ColumnPosts):
        return posts.key()
    if not posts or not all(isinstance(p, PostProcess) for p in posts):
        return None
    p0 = posts[0]
    rest = post_rest(p0)
    for p in posts:
        if p is not p0 and post_rest(p) != rest:
            return None
    return _alike_key(p0, tuple(p.requant.scale for p in posts))


def per_column(post: object) -> TypeGuard[tuple[PostProcess, ...] | ColumnPosts]:
    """Whether `post` is a per-column epilogue (a tuple of posts or a `ColumnPosts`)."""
    return isinstance(post, tuple | ColumnPosts)


def posts_but_scale(post: Post | None) -> Sequence[PostProcess]:
    """Posts holding between them every field of the epilogue's columns but their
    requantization scale (for a reader of the other fields): a `ColumnPosts`'s first one
    alone, else `posts_of`."""
    if isinstance(post, ColumnPosts):
        return (post.first,)
    return posts_of(post)


def posts_of(post: Post | None) -> Sequence[PostProcess]:
    """The distinct-or-not list of PostProcess objects of an epilogue (empty for None)."""
    if post is None:
        return ()
    return (post,) if isinstance(post, PostProcess) else post


def apply_columns(post: Post, acc: np.ndarray) -> np.ndarray:
    """Apply a per-tensor or per-column epilogue to `acc` [..., N].

    Columns are evaluated by group, not one by one: columns whose float32 requantizers
    differ only in scale and zero point but share every later stage are requantized
    together (the kernel's `requant_float_concrete` takes per-column scales), then the
    shared stages run once on the group; other columns sharing an identical
    `PostProcess` are evaluated together.
    """
    acc = np.asarray(acc, dtype=np.int64)
    if isinstance(post, PostProcess):
        return post.apply(acc)
    n = acc.shape[-1]
    if len(post) != n:
        raise ValueError(f"per-column epilogue has {len(post)} entries for {n} output columns")
    out = np.empty(acc.shape, dtype=np.int64)
    float_groups, rest = _column_plan(post)
    for fg in float_groups:
        out[..., fg.cols] = _apply_float_group(fg, acc[..., fg.cols])
    for p, cols in rest:
        out[..., cols] = p.apply(acc[..., cols])
    return out


class _FloatGroup(NamedTuple):
    """Columns whose float32 requantizers differ in scale and zero point only."""

    members: list[PostProcess]  # the first one's stages after requantization are every one's
    cols: list[int]
    scales: np.ndarray  # float32, per column of `cols`
    zps: np.ndarray  # int64, per column of `cols`


# `apply_columns`' grouping of a per-column epilogue, by the epilogue's identity (a MatMul's
# tiles and the ledger's runs apply the same one again)
_PLANS: ByIdentity[tuple[list[_FloatGroup], list[tuple[PostProcess, list[int]]]]] = ByIdentity(256)


def _column_plan(
    post: Sequence[PostProcess],
) -> tuple[list[_FloatGroup], list[tuple[PostProcess, list[int]]]]:
    """(the float32 groups, the other columns by identical PostProcess) of `post`; a
    `ColumnPosts` of valid requantizers is one group, read from its scales."""
    hit = _PLANS.get(post)
    if hit is not None:
        return hit
    if isinstance(post, ColumnPosts) and post.requants_valid():
        n = len(post)
        zps = np.full(n, int(post.first.requant.zp), dtype=np.int64)
        whole = _FloatGroup([post.first], list(range(n)), post.float32_scales(), zps)
        return _PLANS.put(post, ([whole], []))
    one = _one_float_group(post)
    if one is not None:
        return _PLANS.put(post, ([one], []))
    # by object first (a group's columns share one), then float32 requantizers by their tail
    # (objects equal but apart are requantized by their own scale: the same values)
    by_id: dict[int, list[int]] = {}
    distinct: list[tuple[PostProcess, list[int]]] = []
    for j, p in enumerate(post):
        cols_of = by_id.get(id(p))
        if cols_of is None:
            by_id[id(p)] = cols_of = [j]
            distinct.append((p, cols_of))
        else:
            cols_of.append(j)
    tails: dict[tuple[int, ...], tuple[str, Term]] = {}  # `_tail_key` by its fields' ids
    by_tail: dict[tuple, list[tuple[PostProcess, list[int]]]] = {}
    groups: dict[PostProcess, list[int]] = {}
    for p, cols_of in distinct:
        rq = p.requant
        if rq.scheme != "float32":
            groups.setdefault(p, []).extend(cols_of)
            continue
        ids = (id(rq.out_type), id(p.add), id(p.clip), id(p.lut))
        tail = tails.get(ids)
        if tail is None:
            tail = tails[ids] = _tail_key(p)
        by_tail.setdefault(tail, []).append((p, cols_of))
    float_groups: list[_FloatGroup] = []
    for pairs in by_tail.values():
        if len(pairs) < 2:  # one epilogue: applied whole, with the other columns
            groups.setdefault(pairs[0][0], []).extend(pairs[0][1])
            continue
        members = [p for p, _ in pairs]
        counts = [len(c) for _, c in pairs]
        float_groups.append(_float_group(members, [j for _, c in pairs for j in c], counts))
    return _PLANS.put(post, (float_groups, list(groups.items())))


def _one_float_group(post: Sequence[PostProcess]) -> _FloatGroup | None:
    """`_column_plan`'s answer where it is one float32 group of every column in order (and
    no other columns): distinct posts with float32 requantizers, alike but for their scale
    (`alike_but_scale`: a per-channel op's columns as made); None otherwise, without
    deciding more."""
    n = len(post)
    if n < 2 or post[0].requant.scheme != "float32" or not alike_but_scale(post):
        return None
    if len({id(p) for p in post}) != n:
        return None
    return _float_group(list(post), list(range(n)), None)


def _float_group(
    members: list[PostProcess], cols: list[int], counts: list[int] | None
) -> _FloatGroup:
    """The float32 group of `members` (checked), whose columns `cols` are `counts[k]` of
    member k's in turn (one each without `counts`)."""
    _check_requants(members)
    n = len(members)
    scales = np.fromiter((p.requant.scale for p in members), np.float64, n).astype(np.float32)
    zps = np.fromiter((p.requant.zp for p in members), np.int64, n)
    if counts is None:
        return _FloatGroup(members, cols, scales, zps)
    return _FloatGroup(members, cols, np.repeat(scales, counts), np.repeat(zps, counts))


def alike_but_scale(posts: Sequence[PostProcess]) -> bool:
    """Whether every post is the first one but for its requantization's scale: every other
    field, and every other field of its requantizer, the same object (a per-channel op's
    columns as made: `PostProcess.with_requants` of `RequantParams.with_scales`)."""
    p0 = posts[0]
    r0 = p0.requant
    for p in posts:
        rq = p.requant
        if not (
            p.lut is p0.lut
            and p.add is p0.add
            and p.clip is p0.clip
            and p.function is p0.function
            and p.out_type is p0.out_type
            and p.out_zp is p0.out_zp
            and rq.scheme is r0.scheme
            and rq.zp is r0.zp
            and rq.out_type is r0.out_type
            and rq.multiplier is r0.multiplier
            and rq.shift is r0.shift
        ):
            return False
    return True


def _tail_key(p: PostProcess) -> tuple[str, Term]:
    """What a float32 group shares: the requantized type and the stages after it (as a
    term, so every field that changes the value is in the key and no other)."""
    return (p.requant.out_type, _tail_term(p))


def float32_requants_valid(rqs: Sequence[RequantParams]) -> bool:
    """Whether every one of `rqs` is a float32 requantizer `check()` accepts, decided at once
    (a per-channel epilogue has thousands): the scheme, one output type, each zero point in
    it, each scale finite and positive in float32. False says only that one may not be."""
    if not rqs:
        return True
    try:
        t = int_type(rqs[0].out_type)
        zps = np.asarray([r.zp for r in rqs], dtype=np.int64)
        with np.errstate(over="ignore", invalid="ignore"):
            s = np.asarray([np.nan if r.scale is None else r.scale for r in rqs], np.float32)
        return (
            all(r.scheme == "float32" and r.out_type == t.name for r in rqs)
            and bool(((zps >= t.min) & (zps <= t.max)).all())
            and bool((np.isfinite(s) & (s > 0)).all())
        )
    except (KernelError, TypeError, ValueError, OverflowError):
        return False


def _check_requants(members: list[PostProcess]) -> None:
    """`p.requant.check()` for every float32 member, at once where every one is valid; the
    first invalid one raises its own error."""
    rqs = [p.requant for p in members]
    if not float32_requants_valid(rqs):
        for r in rqs:
            r.check()


def _apply_float_group(fg: _FloatGroup, acc: np.ndarray) -> np.ndarray:
    """Float32 requantization with per-column scale/zp, then the group's shared stages."""
    if acc.size and (acc.min() < INT32_MIN or acc.max() > INT32_MAX):
        # the same precondition the term form checks (requant_float is defined on int32)
        bad = int(acc.max()) if acc.max() > INT32_MAX else int(acc.min())
        raise PreconditionViolation(
            f"requant_float: precondition 'acc is int32' fails at input {bad} (out of range); "
            "the result is undefined"
        )
    q = requant_float_concrete(acc, fg.scales, fg.zps, int_type(fg.members[0].requant.out_type))
    return np.asarray(evaluate(_tail_term(fg.members[0]), NUMPY, {"q": q}))


def tail_term(add: AddParams | None, clip: Any, lut: LutParams | None, q: Term) -> Term:
    """`PostProcess.tail_term`: the stages after requantization over `q`, from the only
    fields they read."""
    t = q
    if add is not None:
        t = add.term(t)
    if clip is not None:
        t = op("clip", t, lo=int(clip[0]), hi=int(clip[1]))
    if lut is not None:
        t = lut.term(t)
    return t


def _tail_term(p: PostProcess) -> Term:
    # keyed by the fields the tail reads, not the whole PostProcess: a per-channel model's
    # thousands of columns share a few tails but each has its own requantization scale
    return _shared_tail(p.add, p.clip, p.lut)


@lru_cache(maxsize=4096)
def _shared_tail(add: AddParams | None, clip: Any, lut: LutParams | None) -> Term:
    return tail_term(add, clip, lut, Var("q"))


def columns_of(post: Post, n0: int, n1: int) -> Post:
    """The epilogue of output columns [n0, n1): a per-tensor epilogue is the same for all."""
    if isinstance(post, PostProcess):
        return post
    if not 0 <= n0 < n1 <= len(post):
        raise ValueError(f"columns [{n0}, {n1}) outside a {len(post)}-column epilogue")
    if isinstance(post, ColumnPosts):
        return post if (n0, n1) == (0, len(post)) else post.columns(n0, n1)
    return tuple(post[n0:n1])


def post_to_json(post: Post | None) -> Any:
    if post is None:
        return None
    if isinstance(post, PostProcess):
        return post.to_json()
    return [p.to_json() for p in post]


def post_from_json(j: Any) -> Post | None:
    if j is None:
        return None
    if isinstance(j, list):
        return tuple(PostProcess.from_json(p) for p in j)
    return PostProcess.from_json(j)


def requant_for_columns(rq: RequantParams | Sequence[RequantParams], n: int) -> tuple:
    """A per-tensor or per-column requantization as a tuple of length `n`."""
    if isinstance(rq, RequantParams):
        return (rq,) * n
    if len(rq) != n:
        raise ValueError(f"per-column requantization has {len(rq)} entries for {n} columns")
    return tuple(rq)


ELTWISE_RECORD_BYTES = 32  # header, three float32 values, three zero points, flags


def _column_record_nbytes(add: bool) -> int:
    """One column parameter set's record: a 16-byte header, plus 12 bytes (two float32
    ratios and the constant) with a post-requantization add stage."""
    return 16 + (12 if add else 0)


def column_record_nbytes(posts: Iterable[PostProcess]) -> int:
    """`max(record_nbytes(p) for p in posts)` (one column's record at most), read at once."""
    return _column_record_nbytes(any(p.add is not None for p in posts))


def record_nbytes(post: Post | EltwiseParams) -> int:
    """Size of a parameter record: each column parameter set's (`_column_record_nbytes`);
    an elementwise unit's record is `ELTWISE_RECORD_BYTES`."""
    if isinstance(post, EltwiseParams):
        return ELTWISE_RECORD_BYTES
    if isinstance(post, ColumnPosts):
        return len(post) * _column_record_nbytes(post.first.add is not None)
    return sum(_column_record_nbytes(p.add is not None) for p in posts_of(post))
