"""The NPU instruction set: instructions as data, each with its semantics in kernel primitives.

Memories: `dram` (host-visible: graph inputs/outputs, constants, host steps),
`sram` (activations), `wmem` (weights and biases), `pmem` (parameter records),
`tmem` (table memory: a fixed number of 256-entry slots).

Every instruction's value semantics is a kernel function or term:
- `MatMul`: `prover.matmul.matmul_acc`, then the descriptor's `PostProcess`
  epilogue (`PostProcess.epilogue_term`, evaluated with the NUMPY domain): requantize,
  the optional add stage (ORT's QLinearAdd in float32, `AddParams`), clip, table;
- `Activation`: the kernel's `lut` primitive;
- `Requant`: `RequantParams.term` (the kernel's requant primitives);
- `Clip`: the kernel's `clip` primitive, then storage in `dtype`;
- `Eltwise`: the kernel's `npu_eltwise` primitive on two sram operands (numpy
  broadcasting), its record in pmem, then the optional table in tmem;
- `HostCall`: a host step (`HostKernel` term with NUMPY, or ONNX Runtime).
`PostProcess` (the fused epilogue descriptor) is defined in `npu_backend.postprocess`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from prover.by_identity import ByIdentity
from prover.conv import Window, conv_acc
from prover.domain import NUMPY
from prover.eltwise import EltwiseParams
from prover.pool import max_pool
from prover.terms import Term, Var, evaluate, op

from .exact_matmul import exact_matmul
from .lowered import HostKernel, HostOnnx
from .moves import gather
from .postprocess import (
    ColumnPosts,
    LutParams,
    Post,
    PostProcess,
    RequantParams,
    apply_columns,
    posts_but_scale,
    record_nbytes,
    requant_for_columns,
)

X = Var("x")
A, B = Var("a"), Var("b")
MEMORY_NAMES = ("dram", "sram", "wmem", "pmem", "tmem")


@dataclass(frozen=True)
class DmaIn:
    """Copy tensor `tensor` from dram to `dst` ("sram" or "wmem") at `addr`."""

    tensor: str
    dst: str
    addr: int
    nbytes: int


@dataclass(frozen=True)
class DmaOut:
    """Copy tensor `tensor` from sram (at `addr`) back to dram."""

    tensor: str
    addr: int
    nbytes: int


@dataclass(frozen=True)
class TableLoad:
    """Load constant table `table` (from dram) into table-memory slot `slot` (byte `addr`)."""

    table: str
    slot: int
    addr: int
    nbytes: int


@dataclass(frozen=True)
class ParamLoad:
    """Load a postprocessing parameter record (header) into pmem at `addr`.

    `record` holds the epilogue parameters without table contents (the table is
    in table memory); one record per MatMul with postprocessing enabled.
    """

    record: str
    addr: int
    nbytes: int
    post: Post | EltwiseParams


@dataclass(frozen=True, kw_only=True)
class MatMul:
    """out = epilogue(matmul_acc(a, w, a_zp, w_zp, bias)); a in sram, w/bias in wmem.

    Descriptor fields: `post_enable` (postprocessing on), `post` (the epilogue, per
    tensor or per column), `param_addr` (its parameter record in pmem), `function`
    (LUT function selection or None), `table_slot`/`table_addr` (the table in tmem),
    `intermediate_type` (requantized storage type), `out_type`/`out_zp` (final
    output encoding), `structure` (scheduling). With `post_enable` False the output
    is the raw int32 accumulator and every postprocessing field is None.

    Tiled form (`tile` set): the instruction computes output columns `cols` = [n0, n1)
    only, streaming `a`, `w` and `bias` from dram tile by tile ((tm, tn, tk) = `tile`,
    n1 - n0 <= tn) through sram/wmem staging buffers at `a_addr`/`w_addr`, accumulating
    over K tiles and postprocessing each finished output tile, which goes to dram.
    `post`, `w_zp` and the parameter record are those of exactly the columns `cols`
    (column j of the instruction is column n0 + j of the MatMul). `w_stationary`: the
    whole [K, n1 - n0] weight block stays in wmem across the M tiles (else re-read).

    `a_zp_input`: the zero point is a run-time operand, the one-element tensor of that
    name in dram, read when the instruction runs (`a_zp` is then 0 and unused).
    """

    name: str
    a: str
    w: str
    bias: str | None
    out: str
    a_zp: int
    w_zp: int | tuple[int, ...]
    a_type: str
    w_type: str
    a_addr: int
    out_addr: int
    post_enable: bool
    post: Post | None
    param_addr: int | None
    function: str | None
    table_slot: int | None
    table_addr: int | None
    intermediate_type: str | None
    out_type: str
    out_zp: int | None  # None when a LUT without a build spec leaves it unknown
    structure: str = "plain"
    cols: tuple[int, int] | None = None
    tile: tuple[int, int, int] | None = None
    w_addr: int | None = None
    w_stationary: bool = False
    window: Window | None = None  # a conv over a window (`prover.conv`): `a` channels-last
    unit: str | None = None  # "Pool": the Pool unit's window sum (a pool, not a model MAC)
    a_zp_input: str | None = None  # a run-time zero point: a one-element tensor in dram
    w_input: bool = False  # `w` is a run-time tensor [..., K, N] (batched by a's leading dims)

    def accumulate(
        self, a: np.ndarray, w: np.ndarray, bias: np.ndarray | None, a_zp: int | None = None
    ) -> np.ndarray:
        """The exact accumulator (the kernel's `matmul_acc`, fast where provably exact; a
        conv's over each output element's patch, `prover.conv.conv_acc`); `a_zp`: the
        run-time zero point read from `a_zp_input` (default the descriptor's `a_zp`)."""
        zp = self.a_zp if a_zp is None else int(a_zp)
        if self.window is not None:
            return conv_acc(a, w, self.window, zp, self.w_zp, bias, matmul=exact_matmul)
        return exact_matmul(a, w, zp, self.w_zp, bias)

    def epilogue(self, acc: np.ndarray, table: tuple[int, ...] | None) -> np.ndarray:
        """The postprocessing, with the LUT taken from table memory (`table`)."""
        if not self.post_enable:
            return acc
        return apply_columns(self.loaded_post(table), acc)

    def loaded_post(self, table: tuple[int, ...] | None) -> Post:
        """The epilogue with every LUT holding `table` (what table memory holds): the
        descriptor's own where that is its table."""
        return _loaded(self.enabled_post(), table)

    def enabled_post(self) -> Post:
        """The epilogue of a descriptor with `post_enable` set (ValueError if it has none)."""
        if self.post is None:
            raise ValueError(f"{self.name}: post_enable is set but the descriptor has no epilogue")
        return self.post


@dataclass(frozen=True, kw_only=True)
class Activation:
    """Standalone activation: out = table[index(x)] with table `table` in slot `table_slot`."""

    name: str
    x: str
    out: str
    x_addr: int
    out_addr: int
    table: str
    table_slot: int
    table_addr: int
    in_type: str
    out_type: str
    index_order: str
    function: str | None

    def term(self, table: tuple[int, ...], x: Term = X) -> Term:
        return LutParams(table, self.in_type, self.out_type, self.index_order).term(x)


@dataclass(frozen=True)
class Requant:
    """Standalone requantization (per tensor, or a tuple per last-axis column)."""

    name: str
    x: str
    out: str
    x_addr: int
    out_addr: int
    param_addr: int
    requant: RequantParams | tuple[RequantParams, ...]

    @property
    def out_type(self) -> str:
        rq = self.requant if isinstance(self.requant, RequantParams) else self.requant[0]
        return rq.out_type

    def compute(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.int64)
        if isinstance(self.requant, RequantParams):
            return np.asarray(evaluate(self.requant.term(Var("x")), NUMPY, {"x": x}))
        cols = requant_for_columns(self.requant, x.shape[-1])
        return apply_columns(tuple(PostProcess(rq) for rq in cols), x)


@dataclass(frozen=True)
class Clip:
    """Standalone clamp: out = clip(x, lo, hi), stored as `dtype`."""

    name: str
    x: str
    out: str
    x_addr: int
    out_addr: int
    lo: int
    hi: int
    dtype: str

    def term(self, x: Term = X) -> Term:
        return op("clip", x, lo=int(self.lo), hi=int(self.hi))


@dataclass(frozen=True, kw_only=True)
class Eltwise:
    """Two-input elementwise op: out = [table](npu_eltwise(a, b)), `b` broadcast to `a`'s
    shape or both to the output's (numpy rules); the record at `param_addr` in pmem, the
    table (when `table_slot` is set) in tmem, read with `in_type` = the record's dtype."""

    name: str
    a: str
    b: str
    out: str
    a_addr: int
    b_addr: int
    out_addr: int
    param_addr: int
    record: EltwiseParams
    table: str | None = None  # the table constant (its contents in tmem at `table_slot`)
    table_slot: int | None = None
    table_addr: int | None = None
    function: str | None = None
    out_type: str = "uint8"
    index_order: str = "offset"

    def term(self, table: tuple[int, ...] | None, a: Term = A, b: Term = B) -> Term:
        t: Term = op("npu_eltwise", a, b, **self.record.params())
        if self.table_slot is None:
            return t
        lp = LutParams(table, self.record.dtype, self.out_type, self.index_order)
        return lp.term(t)


@dataclass(frozen=True)
class Move:
    """Data movement: out (`shape`) = the strided gather of x (`npu_backend.moves.gather`)."""

    name: str
    x: str
    out: str
    x_addr: int
    out_addr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    dtype: str

    def compute(self, x: np.ndarray) -> np.ndarray:
        return gather(x, tuple(self.shape), tuple(self.strides), int(self.offset))


@dataclass(frozen=True)
class Concat:
    """out = the tensors `xs` joined along `axis`."""

    name: str
    xs: tuple[str, ...]
    out: str
    x_addrs: tuple[int, ...]
    out_addr: int
    axis: int
    dtype: str

    def compute(self, xs: list[np.ndarray]) -> np.ndarray:
        return np.concatenate([np.asarray(x) for x in xs], axis=int(self.axis))


@dataclass(frozen=True)
class MaxPool:
    """out = the largest element of each window of channels-last x (`prover.pool.max_pool`;
    padding reads the type's minimum)."""

    name: str
    x: str
    out: str
    x_addr: int
    out_addr: int
    window: Window
    dtype: str

    def compute(self, x: np.ndarray) -> np.ndarray:
        lo = int(np.iinfo(np.dtype(self.dtype)).min)
        return max_pool(np.asarray(x, dtype=np.int64), self.window, lo)


@dataclass(frozen=True)
class HostCall:
    """Run a host step (integer kernel term, or an ONNX subgraph in ONNX Runtime) on dram tensors."""

    name: str
    step: HostKernel | HostOnnx


Instruction = (
    DmaIn
    | DmaOut
    | TableLoad
    | ParamLoad
    | MatMul
    | Activation
    | Requant
    | Clip
    | Eltwise
    | Move
    | MaxPool
    | Concat
    | HostCall
)
OPCODES: dict[str, type] = {
    c.__name__: c
    for c in (
        DmaIn,
        DmaOut,
        TableLoad,
        ParamLoad,
        MatMul,
        Activation,
        Requant,
        Clip,
        Eltwise,
        Move,
        MaxPool,
        Concat,
        HostCall,
    )
}


def with_table(post: Post, table: tuple[int, ...] | None) -> Post:
    """The epilogue with every LUT's contents replaced by `table` (what tmem holds); `post`
    itself where every LUT holds it already (a descriptor run with its own table: a
    per-channel epilogue's thousands of columns are not copied for it)."""
    held = {id(p.lut): p.lut for p in posts_but_scale(post) if p.lut is not None}
    if all(lut.table == table for lut in held.values()):
        return post

    luts: dict[int, LutParams] = {}  # per-channel columns share one LutParams: one copy

    def one(p: PostProcess) -> PostProcess:
        if p.lut is None:
            return p
        lut = luts.get(id(p.lut))
        if lut is None:
            lut = luts[id(p.lut)] = replace(p.lut, table=table)
        # `replace` cost most of a per-channel record's stripping
        return p.with_lut(lut)

    if isinstance(post, PostProcess):
        return one(post)
    if isinstance(post, ColumnPosts):  # the columns share every field but the scale
        return post.like(one(post.first))
    made: dict[int, PostProcess] = {}  # a column group's columns share one post: one copy
    out = []
    for p in post:
        q = made.get(id(p))
        if q is None:
            q = made[id(p)] = one(p)
        out.append(q)
    return tuple(out)


# `with_table`'s answers by the epilogue's identity and the table: codegen, the lifetime
# check and the program's validation each ask for every step's record (`strip_tables`),
# and a per-channel epilogue's thousands of PostProcess would be rebuilt for every tile and
# every run of the ledger's programs
_LOADED: ByIdentity[Post] = ByIdentity(256)


def _loaded(post: Post, table: tuple[int, ...] | None) -> Post:
    """`with_table(post, table)`, the same object for the same epilogue and table."""
    hit = _LOADED.get(post, table)
    return hit if hit is not None else _LOADED.put(post, with_table(post, table), table)


def strip_tables(post: Post) -> Post:
    """The parameter record of an epilogue: everything but the table contents."""
    return _loaded(post, None)


def table_of(post: Post | None) -> tuple[int, ...] | None:
    """The single table an epilogue uses (None without a LUT)."""
    # per distinct LutParams first: per-channel columns share one (a table's hash is not
    # kept, and hashing it once per column cost more than the rest of the record)
    luts = {id(p.lut): p.lut for p in posts_but_scale(post) if p.lut is not None}
    tables = {lut.table for lut in luts.values()}
    if not tables:
        return None
    if len(tables) > 1:
        raise ValueError("an epilogue uses one table per MatMul")
    return next(iter(tables))


__all__ = [
    "MEMORY_NAMES",
    "DmaIn",
    "DmaOut",
    "TableLoad",
    "ParamLoad",
    "MatMul",
    "Activation",
    "Requant",
    "Clip",
    "Eltwise",
    "HostCall",
    "Instruction",
    "OPCODES",
    "LutParams",
    "Post",
    "PostProcess",
    "RequantParams",
    "apply_columns",
    "with_table",
    "strip_tables",
    "record_nbytes",
    "table_of",
]
