"""A unary region's table, taken from ONNX Runtime on every code, with its position check.

A unary region (`compiler.frontend.ops.unary_region`) is a set of elementwise ONNX nodes
whose only non-constant input is one 8-bit tensor U and whose one output Y is 8-bit: a
function of one code, so a 256-entry table. This module runs the region's own nodes in
ONNX Runtime (the session level the reference runs host steps at) on a tensor holding
every code, and *establishes* that the result is a function of the code alone: ORT's
MLAS kernels have SIMD bodies and scalar tails, and the thread pool splits long tensors
into chunks, so the same code is also evaluated

- at every offset 0..16 of a tensor (each code in every lane of a 16-wide vector body),
- in tensors of every length 1..64, rotated through the codes so that every code sits
  at every position of every one of these lengths (every tail length and tail position;
  256 runs per length),
- in one long tensor (65 792 + 13 elements: many vector blocks, a tail, and the thread
  pool's chunking) with one intra-op thread and with ORT's default thread count,

and every evaluation of a code must give the same output. Otherwise the region is refused
(`RegionError`, `region_position_dependent`), naming the code and the two positions. The
check would fail if a kernel's tail path or a chunk boundary computed a code differently
(`tests/test_unary_regions.py`: a region containing a Softmax fails it).

Cost: about 16,400 short runs per distinct region model (8 us each, about 0.13 s), so the probes
are built once per input type and rank, the outputs compared in one pass, and the pool
threads sleep between runs; regions that differ only in names are one model (canonical
names) and checked once. Evidence is not shared between regions with other constants: a
vector body and a scalar tail may round differently for some values only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import NamedTuple

import numpy as np
import onnx
from onnx import helper as oh
from onnx import numpy_helper as nh

from prover.inttypes import int_type
from prover.verdict import ReasonCode

OFFSETS = range(17)
LENGTHS = range(1, 65)
LONG = 256 * 257 + 13


class RegionError(Exception):
    """Why a region is not one table: a reason code and a message naming the nodes."""

    def __init__(
        self, message: str, code: ReasonCode = ReasonCode.REGION_POSITION_DEPENDENT
    ) -> None:
        super().__init__(message)
        self.code = ReasonCode(code)
        self.message = message


def region_model(
    nodes: Sequence[onnx.NodeProto],
    consts: Mapping[str, np.ndarray],
    u: str,
    y: str,
    in_type: str,
    rank: int,
    opsets: Mapping[str, int],
) -> onnx.ModelProto:
    """The region's nodes as a model `u[1,...,1,n] -> y` (the last axis dynamic; `y`'s
    type is what ORT computes). Names are canonical (`u`, `y`, `v0`.., `c0`.., `n0`..), so
    the same region with the same constants elsewhere in a model is the same model and is
    checked once (`region_table` is cached by the serialised model)."""
    elem = {"int8": onnx.TensorProto.INT8, "uint8": onnx.TensorProto.UINT8}
    shape: list[int | str] = [1] * (rank - 1) + ["n"]
    names = {u: "u", y: "y", "": ""}
    for k in consts:
        names.setdefault(k, f"c{len(names)}")
    canon = []
    for i, n in enumerate(nodes):
        c = onnx.NodeProto()
        c.CopyFrom(n)
        c.name = f"n{i}"
        c.input[:] = [names.setdefault(v, f"v{len(names)}") for v in n.input]
        c.output[:] = [names.setdefault(v, f"v{len(names)}") for v in n.output]
        canon.append(c)
    g = oh.make_graph(
        canon,
        "unary_region",
        [oh.make_tensor_value_info("u", elem[in_type], shape)],
        [onnx.ValueInfoProto(name="y")],
        [nh.from_array(np.asarray(v), names[k]) for k, v in consts.items()],
    )
    ops = [oh.make_opsetid(d, int(v)) for d, v in opsets.items() if d not in ("ai.onnx",)]
    if not any(o.domain == "" for o in ops):
        ops.append(oh.make_opsetid("", int(opsets.get("ai.onnx", 17))))
    m = oh.make_model(g, opset_imports=ops)
    m.ir_version = min(m.ir_version, 10)
    return m


def _sessions(blob: bytes, level: str):
    import onnxruntime as ort

    out = []
    for threads in (0, 1):  # ORT's default thread count, then one thread
        so = ort.SessionOptions()
        so.graph_optimization_level = (
            ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            if level == "default"
            else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        )
        so.intra_op_num_threads = threads
        so.log_severity_level = 3
        # Idle pool threads sleep instead of spinning between the check's ~1,300 short runs
        # (the spin burnt more CPU than the runs). Only the idle wait changes: the thread
        # count, and so how ORT splits a tensor into chunks, is the same.
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        out.append(ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"]))
    return out


class CheckedTable(NamedTuple):
    """What the position check of one region model established."""

    table: tuple[int, ...]  # ORT's output for every code, offset index order
    out_type: str  # the element type of ORT's output (a numpy dtype name)


def region_table(blob: bytes, in_type: str, rank: int, level: str, what: str) -> tuple[int, ...]:
    """The table (offset index order) ORT computes for the region model `blob`, after the
    position check (module docstring); `RegionError` names `what` and the first code that
    differs."""
    try:
        return _checked_table(blob, in_type, rank, level).table
    except RegionError as e:
        raise RegionError(f"ONNX Runtime computes {what} {e.message}", e.code) from None


def region_out_type(blob: bytes, in_type: str, rank: int, level: str) -> str:
    """The element type ORT's session at `level` gives the region model's output: the type
    of the check's own outputs (cached with its table; no session of its own)."""
    return _checked_table(blob, in_type, rank, level).out_type


@lru_cache(maxsize=512)
def _checked_table(blob: bytes, in_type: str, rank: int, level: str) -> CheckedTable:
    t = int_type(in_type)
    codes = np.arange(t.min, t.max + 1, dtype=np.int64).astype(t.numpy_dtype())
    sess, single = _sessions(blob, level)
    return _check(sess, single, codes, t.min, rank)


def _runner(s) -> Callable[[np.ndarray], np.ndarray]:
    """`x -> y` (flat) on session `s`, refusing a change of size."""
    name = s.get_inputs()[0].name

    def run(x: np.ndarray) -> np.ndarray:
        (y,) = s.run(None, {name: x})
        y = np.asarray(y)
        if y.size != x.size:
            raise RegionError(
                f"with a change of the tensor's size ({x.size} -> {y.size}): not elementwise",
                ReasonCode.REGION_REDUCTION,
            )
        return y.reshape(-1)

    return run


class _Probes(NamedTuple):
    """The position check's inputs for one input type and rank, built once."""

    xs: tuple[np.ndarray, ...]  # every short probe's input, shaped [1,...,1,len]
    flat: tuple[np.ndarray, ...]  # the same, flat
    where: tuple[str, ...]  # each one's label
    pos: np.ndarray  # all short probes' codes' table positions, concatenated
    long_x: np.ndarray  # the long probe, shaped
    long_pos: np.ndarray  # its codes' table positions


@lru_cache(maxsize=8)
def _probes(dtype: str, lo: int, n: int, rank: int) -> _Probes:
    """The probes of the position check (module docstring); the same for every region of
    one input type and rank."""
    codes = (np.arange(n, dtype=np.int64) + lo).astype(np.dtype(dtype))
    lead = (1,) * (rank - 1)
    flat, where = [], []
    for off in OFFSETS:
        flat.append(np.concatenate([np.roll(codes, 7)[:off], codes]))
        where.append(f"offset {off}")
    for length in LENGTHS:
        for start in range(n):  # every code at every position of this length
            flat.append(codes[(start + np.arange(length)) % n])
            where.append(f"length {length}")
    pos = np.concatenate(flat).astype(np.int64) - lo
    idx = (np.arange(LONG) + np.arange(LONG) // n) % n
    xs = tuple(x.reshape(lead + (x.size,)) for x in flat)
    long_x = codes[idx].reshape(lead + (LONG,))
    for a in (*xs, *flat, pos, long_x, idx):
        a.setflags(write=False)  # shared by every region's check
    return _Probes(xs, tuple(flat), tuple(where), pos, long_x, idx)


def _check(sess, single, codes: np.ndarray, lo: int, rank: int) -> CheckedTable:
    """Run every probe, then compare all outputs with the table at once; on a difference,
    name the first probe (in probe order) and position that differs."""
    n = codes.size
    p = _probes(codes.dtype.str, lo, n, rank)
    run, run1 = _runner(sess), _runner(single)
    y0 = run(codes.reshape((1,) * (rank - 1) + (n,)))
    table = y0.astype(np.int64)
    ys = [run(x) for x in p.xs]
    long_ys = [run(p.long_x), run1(p.long_x)]
    short_ok = np.array_equal(np.concatenate(ys).astype(np.int64), table[p.pos])
    long_ok = all(np.array_equal(y.astype(np.int64), table[p.long_pos]) for y in long_ys)
    if not (short_ok and long_ok):
        seen = [
            (x, table[x.astype(np.int64) - lo], y, w)
            for x, y, w in zip(p.flat, ys, p.where, strict=True)
        ]
        long_flat = p.long_x.reshape(-1)
        for y, label in zip(long_ys, ("default threads", "one thread"), strict=True):
            seen.append((long_flat, table[p.long_pos], y, f"length {LONG}, {label}"))
        for x, want, y, where in seen:
            bad = np.nonzero(want != y.astype(np.int64))[0]
            if bad.size:
                i = int(bad[0])
                raise RegionError(
                    f"differently by position: code {int(x[i])} gives {int(want[i])} at "
                    f"position {int(x[i]) - lo} of the {n}-code tensor but {int(y[i])} at "
                    f"position {i} ({where})",
                )
    return CheckedTable(tuple(int(v) for v in table), str(y0.dtype))
