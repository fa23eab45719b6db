"""A unary region's table, taken from ONNX Runtime on every code, with its position check.

A unary region (`compiler.frontend.ops.unary_region`) is a set of elementwise ONNX nodes
whose only non-constant input is one 8-bit tensor U and whose one output Y is 8-bit: a
function of one code, so a 256-entry table. This module runs the region's own nodes in
ONNX Runtime (the session level the reference runs host steps at) on a tensor holding
every code, and *establishes* that the result is a function of the code alone: ORT's
MLAS kernels have SIMD bodies and scalar tails, and the thread pool splits long tensors
into chunks, so the same code is also evaluated

- at every offset 0..16 of a tensor (each code in every lane of a 16-wide vector body),
- in tensors of every length 1..64 (every tail length, every code in each tail position),
- in one long tensor (65 792 + 13 elements: many vector blocks, a tail, and the thread
  pool's chunking) with one intra-op thread and with ORT's default thread count,

and every evaluation of a code must give the same output. Otherwise the region is refused
(`RegionError`, `region_position_dependent`), naming the code and the two positions. The
check would fail if a kernel's tail path or a chunk boundary computed a code differently
(`tests/test_unary_regions.py`: a region containing a Softmax fails it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache

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
        out.append(ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"]))
    return out


def region_table(blob: bytes, in_type: str, rank: int, level: str, what: str) -> tuple[int, ...]:
    """The table (offset index order) ORT computes for the region model `blob`, after the
    position check (module docstring); `RegionError` names `what` and the first code that
    differs."""
    try:
        return _checked_table(blob, in_type, rank, level)
    except RegionError as e:
        raise RegionError(f"ONNX Runtime computes {what} {e.message}", e.code) from None


@lru_cache(maxsize=512)
def _checked_table(blob: bytes, in_type: str, rank: int, level: str) -> tuple[int, ...]:
    t = int_type(in_type)
    codes = np.arange(t.min, t.max + 1, dtype=np.int64).astype(t.numpy_dtype())
    sess, single = _sessions(blob, level)
    name = sess.get_inputs()[0].name
    lead = (1,) * (rank - 1)

    def run(s, x: np.ndarray) -> np.ndarray:
        (y,) = s.run(None, {name: x.reshape(lead + (x.size,))})
        y = np.asarray(y)
        if y.size != x.size:
            raise RegionError(
                f"with a change of the tensor's size ({x.size} -> {y.size}): not elementwise",
                ReasonCode.REGION_REDUCTION,
            )
        return y.reshape(-1).astype(np.int64)

    return _check(sess, single, run, codes, t.min)


def _probes(codes: np.ndarray, lo: int) -> tuple[tuple[np.ndarray, np.ndarray, str], ...]:
    """(input, its codes' table positions, label) of every short probe of the position
    check; the same for every region of one input type, so built once per type."""
    key = (codes.dtype.str, lo, codes.size)
    if key not in _PROBES:
        n = codes.size
        out = []
        for off in OFFSETS:
            out.append((np.concatenate([np.roll(codes, 7)[:off], codes]), f"offset {off}"))
        for length in LENGTHS:
            for start in range(0, n, length):
                out.append((np.roll(codes, -start)[:length], f"length {length}"))
        _PROBES[key] = tuple((x, x.astype(np.int64) - lo, where) for x, where in out)
    return _PROBES[key]


_PROBES: dict[tuple, tuple[tuple[np.ndarray, np.ndarray, str], ...]] = {}


def _check(sess, single, run, codes: np.ndarray, lo: int) -> tuple[int, ...]:
    n = codes.size
    table = run(sess, codes)
    seen: list[tuple[np.ndarray, np.ndarray, np.ndarray, str]] = []
    for x, pos, where in _probes(codes, lo):
        seen.append((x, pos, run(sess, x), where))
    idx = (np.arange(LONG) + np.arange(LONG) // n) % n
    long_x = codes[idx]
    for s, label in ((sess, "default threads"), (single, "one thread")):
        seen.append((long_x, idx, run(s, long_x), f"length {LONG}, {label}"))
    for x, pos, y, where in seen:
        want = table[pos]
        if np.array_equal(want, y):
            continue
        bad = np.nonzero(want != y)[0]
        if bad.size:
            i = int(bad[0])
            raise RegionError(
                f"differently by position: code {int(x[i])} gives {int(want[i])} at position "
                f"{int(x[i]) - lo} of the {n}-code tensor but {int(y[i])} at position {i} "
                f"({where})",
            )
    return tuple(int(v) for v in table)
