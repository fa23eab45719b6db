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

A region ORT runs only with kernels that compute every element by one function by their
construction (`per_element`: a SiLU's QLinearSigmoid and QLinearMul) is not probed: one
run on every code is its table.

Cost: about 16,400 short runs per distinct region model, so the probes are built once per
input type and rank, the outputs compared in one pass, the pool threads sleep between runs,
and regions that differ only in names are one model (canonical names). A model's regions
are checked together at the end of its build (`prefetch`: one merged model, every probe run
once for all; one input, and one output per output type, the regions' outputs concatenated
on the last axis and on the first, which pins each region's output to the probe's shape:
`Merged.rows`), as ORT's cost per run is mostly per tensor passed in and out (2.8x less CPU
on efficientnet_b0's 49 regions than an input and output each); where the regions have few
nodes (a transformer's two GELUs), a length's probes run up to 16 at a time in copies of
the regions, copy j reading its own input (`batch_copies`). Each `lut` is emitted with ORT's
table of one run (`unchecked_table`) and given its checked table then; a region that
differs in a batch is checked again alone, which names the probe, and the model is built
again with that region on the host. Evidence is not shared between regions with other
constants: a vector body and a scalar tail may round differently for some values only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from itertools import pairwise
from typing import Any, NamedTuple

import numpy as np
import onnx
from onnx import helper as oh
from onnx import numpy_helper as nh

from prover.inttypes import int_tuple, int_type
from prover.verdict import ReasonCode

from .errors import ort_errors
from .options import session_level, session_options
from .per_element import read_session, runs_per_element

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


def _sessions(blob: bytes, level: str, threads: tuple[int, ...] = (0, 1)):
    """Sessions of `blob` at `level`, one per thread count (ORT's default, then one). Their
    idle pool threads sleep between the check's short runs (`options.session_options`)."""
    import onnxruntime as ort

    opts = [session_options(session_level(level), t) for t in threads]
    return [ort.InferenceSession(blob, o, providers=["CPUExecutionProvider"]) for o in opts]


class CheckedTable(NamedTuple):
    """What the position check of one region model established."""

    table: tuple[int, ...]  # ORT's output for every code, offset index order
    out_type: str  # the element type of ORT's output (a numpy dtype name)


def region_table(blob: bytes, in_type: str, rank: int, level: str, what: str) -> tuple[int, ...]:
    """The table (offset index order) ORT computes for the region model `blob`, after the
    position check (module docstring); `RegionError` names `what` and the first code that
    differs."""
    return _naming(what, _checked_table, blob, in_type, rank, level).table


def _naming(what: str, fn: Callable[..., CheckedTable], *args: Any) -> CheckedTable:
    """`fn(*args)`, a `RegionError` it raises restated as ORT computing `what` so."""
    try:
        return fn(*args)
    except RegionError as e:
        raise RegionError(f"ONNX Runtime computes {what} {e.message}", e.code) from None


def checked(blob: bytes, in_type: str, rank: int, level: str) -> CheckedTable | None:
    """The region model's checked table if its position check has run in this process."""
    return _TABLES.get((blob, in_type, rank, level))


def quick_table(blob: bytes, in_type: str, rank: int, level: str, what: str) -> CheckedTable:
    """`unchecked_table`, a `RegionError` naming `what` (as `region_table`'s) where ORT's
    output is not one value per code."""
    return _naming(what, unchecked_table, blob, in_type, rank, level)


def region_out_type(blob: bytes, in_type: str, rank: int, level: str) -> str:
    """The element type ORT's session at `level` gives the region model's output: the type
    of the check's own outputs (cached with its table; no session of its own)."""
    return _checked_table(blob, in_type, rank, level).out_type


Key = tuple[bytes, str, int, str]  # (region model, input type, rank, session level)
_TABLES: dict[Key, CheckedTable] = {}  # checked tables, oldest first
MAX_TABLES = 512


def _keep(cache: dict[Key, CheckedTable], key: Key, table: CheckedTable) -> None:
    """`cache[key] = table`, the oldest entries dropped beyond `MAX_TABLES`."""
    cache[key] = table
    while len(cache) > MAX_TABLES:
        del cache[next(iter(cache))]


def _checked_table(blob: bytes, in_type: str, rank: int, level: str) -> CheckedTable:
    key = (blob, in_type, rank, level)
    hit = _TABLES.get(key)
    if hit is None:
        hit = check_alone(blob, in_type, rank, level)
        _keep(_TABLES, key, hit)
    return hit


def _codes(in_type: str) -> tuple[np.ndarray, int]:
    t = int_type(in_type)
    return np.arange(t.min, t.max + 1, dtype=np.int64).astype(t.numpy_dtype()), t.min


def check_alone(blob: bytes, in_type: str, rank: int, level: str) -> CheckedTable:
    """The position check of one region model in sessions of its own (uncached); raises
    `RegionError` naming the first probe that differs."""
    if runs_per_element(blob, level):  # modelled kernels: one run is the table
        return _run_once(blob, in_type, rank, level)
    codes, lo = _codes(in_type)
    sess, single = _sessions(blob, level)
    return _check(sess, single, codes, lo, rank)


_UNCHECKED: dict[Key, CheckedTable] = {}  # ORT's tables without the position check


def unchecked_table(blob: bytes, in_type: str, rank: int, level: str) -> CheckedTable:
    """ORT's output for every code (one run, no position check) and its type: the table a
    region's `lut` is emitted with until its check (`unary_region.resolve`) gives it the
    checked one, and all a build whose IR is discarded (`BuildContext.naming`) gets."""
    key = (blob, in_type, rank, level)
    hit = _TABLES.get(key) or _UNCHECKED.get(key)
    if hit is None:
        hit = _run_once(blob, in_type, rank, level)
        _keep(_UNCHECKED, key, hit)
    return hit


def prefetch_unchecked(requests: Iterable[Key]) -> int:
    """`unchecked_table` of many region models in one run of their merged model."""
    done = 0
    for (in_type, rank, level), blobs in _batches(requests, _UNCHECKED):
        try:
            done += _one_run(merged_model(blobs), blobs, in_type, rank, level, _UNCHECKED)
        except ort_errors():  # some region ORT cannot run: each is run alone, which reports it
            continue
    return done


def _one_run(
    merged: Merged, blobs: Sequence[bytes], in_type: str, rank: int, level: str, into: dict
) -> int:
    """Each region's table from one run of `merged` (theirs) on every code, kept `into`
    a cache; returns how many regions wrote a tensor of the probe's shape."""
    codes, _ = _codes(in_type)
    x = codes.reshape((1,) * (rank - 1) + (codes.size,))
    sess = read_session(merged.blob, level) or _sessions(merged.blob, level, threads=(0,))[0]
    ys = _split(merged, sess.run(None, {PROBE: x}), x.shape)
    for blob, y in zip(blobs, ys, strict=True):
        if y is not None:
            _keep(into, (blob, in_type, rank, level), _table_of(y))
    return sum(y is not None for y in ys)


def _table_of(y: np.ndarray) -> CheckedTable:
    return CheckedTable(int_tuple(y), str(y.dtype))


def _run_once(blob: bytes, in_type: str, rank: int, level: str) -> CheckedTable:
    """ORT's output for every code, one run in one tensor, and its type."""
    codes, _ = _codes(in_type)
    sess = read_session(blob, level) or _sessions(blob, level, threads=(0,))[0]
    return _table_of(_runner(sess)(codes.reshape((1,) * (rank - 1) + (codes.size,))))


def _batches(
    requests: Iterable[Key], known: Mapping[Key, CheckedTable]
) -> list[tuple[tuple[str, int, str], list[bytes]]]:
    """Requests not in `_TABLES` or `known`, in batches of two or more by (input type,
    rank, level), those of other opsets apart (a merged model has one opset list)."""
    groups: dict[tuple, list[bytes]] = {}
    for key in dict.fromkeys(requests):
        if key in _TABLES or key in known:
            continue
        blob, in_type, rank, level = key
        ops = tuple((o.domain, o.version) for o in onnx.load_from_string(blob).opset_import)
        groups.setdefault((in_type, rank, level, ops), []).append(blob)
    return [(k[:3], v) for k, v in groups.items() if len(v) > 1]


PROBE = "probe"  # the one input of a merged model (a region model's own is `u`)


class Merged(NamedTuple):
    """A merged model and where each region's output is in its outputs."""

    blob: bytes
    # each output: its name and the regions (indices into the blobs) it holds, in order;
    # an output of several regions is their outputs concatenated on the last axis
    outputs: tuple[tuple[str, tuple[int, ...]], ...]
    # the graph's outputs after `outputs`: rows[g] is outputs[g]'s regions concatenated on
    # the first axis; ORT's Concat refuses other axes that differ, so the two pin each
    # region's output to one shape, which a concatenation's size alone does not (twice the
    # values beside an empty one add up to two regions' worth)
    rows: tuple[str, ...] = ()
    # copies of every region, copy j reading input `probe{j}` (one copy: `probe`); an
    # output then holds its regions' outputs for copy 0, then for copy 1, ...
    copies: int = 1


def merged_model(
    blobs: Sequence[bytes], out_types: Sequence[str | None] = (), copies: int = 1
) -> Merged:
    """Region models side by side in one model: model k's values, nodes and constants are
    prefixed `r{k}_`, and every model reads the one input `probe`. Each node reads only its
    own region's tensors (and the probe), so every kernel sees exactly the tensor it sees
    alone. Regions whose output type is known (`out_types[k]`, a numpy dtype name) are
    concatenated per type into one output `y_{type}` (after their last node, which still
    writes a tensor of its own); the others are outputs `r{k}_y`. One input and one output
    halve ORT's cost per region node and run, which is per tensor passed in and out.

    With `copies` > 1 every region is there that many times, copy j prefixed `c{j}_r{k}_`
    and reading an input `probe{j}` of its own (so one run checks that many probes, each
    kernel still on the tensor it reads alone); every region's output type must be known
    and the rank at least 2 (`batch_copies`)."""
    first = onnx.load_from_string(blobs[0])
    graphs = [onnx.load_from_string(blob).graph for blob in blobs]
    probes = [PROBE] if copies == 1 else [f"{PROBE}{j}" for j in range(copies)]
    nodes, inits = [], []
    for j, probe in enumerate(probes):
        for k, g in enumerate(graphs):
            pre = f"r{k}_" if copies == 1 else f"c{j}_r{k}_"
            rename = {"": "", "u": probe}
            for n in g.node:
                c = onnx.NodeProto()
                c.CopyFrom(n)
                c.name = pre + n.name
                c.input[:] = [rename.get(v, pre + v) for v in n.input]
                c.output[:] = [rename.get(v, pre + v) for v in n.output]
                nodes.append(c)
            for t in g.initializer:
                c2 = onnx.TensorProto()
                c2.CopyFrom(t)
                c2.name = pre + t.name
                inits.append(c2)
    ins = []
    for probe in probes:
        vi = onnx.ValueInfoProto()
        vi.CopyFrom(first.graph.input[0])
        vi.name = probe
        ins.append(vi)
    by_type: dict[str, list[int]] = {}
    alone: list[int] = []
    for k in range(len(blobs)):
        t = out_types[k] if k < len(out_types) else None
        (by_type.setdefault(t, []) if t is not None else alone).append(k)
    rank = len(ins[0].type.tensor_type.shape.dim)
    if copies > 1 and (alone or rank < 2):
        raise ValueError("copies of regions need every output type known and rank >= 2")
    outputs: list[tuple[str, tuple[int, ...]]] = []
    rows: list[str] = []
    for t, ks in by_type.items():
        if copies == 1 and (len(ks) == 1 or rank < 2):  # rank 1: no second axis to pin with
            alone.extend(ks)
            continue
        parts = [f"r{k}_y" if copies == 1 else f"c{j}_r{k}_y" for j in range(copies) for k in ks]
        name = f"y_{t}"
        nodes.append(oh.make_node("Concat", parts, [name], name=name, axis=-1))
        nodes.append(oh.make_node("Concat", parts, [f"{name}_rows"], name=f"{name}_rows", axis=0))
        outputs.append((name, tuple(ks)))
        rows.append(f"{name}_rows")
    outputs += [(f"r{k}_y", (k,)) for k in sorted(alone)]
    names = [o for o, _ in outputs] + rows
    g2 = oh.make_graph(
        nodes, "unary_regions", ins, [onnx.ValueInfoProto(name=o) for o in names], inits
    )
    m = oh.make_model(g2, opset_imports=list(first.opset_import))
    m.ir_version = first.ir_version
    return Merged(m.SerializeToString(), tuple(outputs), tuple(rows), copies)


# A length's 256 probes run `batch_copies` at a time where the regions are few (ORT's cost
# per run then dominates its cost per node: bert's 14 GELU nodes, 16,384 runs 0.18 s, 8 at a
# time 0.11 s); about 100 region nodes gain nothing and pay for a larger session.
COPY_NODES = 128
MAX_COPIES = 16


def batch_copies(merged: Merged, out_types: Sequence[str | None], rank: int) -> int:
    """How many copies of `merged`'s regions (of output types `out_types`, inputs of
    `rank`) one run of a length's probes holds: a power of two (dividing a length's 256
    probes) with at most COPY_NODES region nodes; 1 when there is no room for two, or when
    some region's output type is not known or the rank is 1 (no concatenation of its
    copies that pins each one's shape: `merged_model`)."""
    if merged.copies != 1 or rank < 2 or any(t is None for t in out_types):
        return 1
    per_copy = len(onnx.load_from_string(merged.blob).graph.node) - 2 * len(merged.rows)
    b = 1
    while 2 * b <= MAX_COPIES and 2 * b * per_copy <= COPY_NODES:
        b *= 2
    return b


def _shaped(merged: Merged, ys: Sequence[Any], shape: tuple[int, ...]) -> list[bool]:
    """Per output of `merged` (a run's outputs `ys` on a probe of `shape`): whether every
    region in it wrote a tensor of the probe's shape (an output of one region: its own
    size is checked where it is read)."""
    ok = [True] * len(merged.outputs)
    for g, y in enumerate(ys[len(merged.outputs) :]):  # rows[g] is outputs[g]'s
        ok[g] = np.shape(y) == (merged.copies * len(merged.outputs[g][1]), *shape[1:])
    return ok


def _split(merged: Merged, ys: Sequence[Any], shape: tuple[int, ...]) -> list[np.ndarray | None]:
    """Each region's flat output from a run of `merged` on a probe of `shape`; None for the
    regions of an output whose regions did not each write a tensor of that shape (not
    elementwise)."""
    length = int(np.prod(shape))
    shaped = _shaped(merged, ys, shape)
    out: list[np.ndarray | None] = [None] * sum(len(ks) for _, ks in merged.outputs)
    for g, (y, (_, ks)) in enumerate(zip(ys, merged.outputs, strict=False)):
        y = np.asarray(y)
        if shaped[g] and y.size == len(ks) * length:
            for j, row in zip(ks, y.reshape(len(ks), length), strict=True):
                out[j] = row
    return out


def _known_type(key: Key) -> str | None:
    hit = _TABLES.get(key) or _UNCHECKED.get(key)
    return hit.out_type if hit is not None else None


def prefetch(requests: Iterable[Key]) -> int:
    """Position-check many region models at once (one model of them all per input type,
    rank, level and opsets: `merged_model`), so the ~16,400 probes are run once for all
    instead of once each (each ORT run has a fixed cost of its own besides its kernels').
    The probes and what is compared are those of the check alone; a model whose every
    probe agrees is cached as checked. One that differs anywhere (or a batch ORT cannot
    run) is left to the check alone when the region is converted, which names the probe.
    Returns the number of models cached. Verdicts and tables do not depend on it."""
    done = 0
    for (in_type, rank, level), blobs in _batches(requests, {}):
        types = [_known_type((b, in_type, rank, level)) for b in blobs]
        codes, lo = _codes(in_type)
        try:
            merged = merged_model(blobs, types)
            if runs_per_element(merged.blob, level):  # modelled kernels: one run is the table
                done += _one_run(merged, blobs, in_type, rank, level, _TABLES)
                continue
            sess, single = _sessions(merged.blob, level)
            copies = batch_copies(merged, types, rank)
            batched = None
            if copies > 1:
                many = merged_model(blobs, types, copies)
                batched = (many, _sessions(many.blob, level, threads=(0,))[0])
            found = _check_many(merged, sess, single, codes, lo, rank, batched)
        except ort_errors():  # some region ORT cannot run: each is checked alone, reporting it
            continue
        for blob, checked in zip(blobs, found, strict=True):
            if checked is not None:
                _keep(_TABLES, (blob, in_type, rank, level), checked)
                done += 1
    return done


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
    starts: np.ndarray  # where each short probe's codes start in `pos` (and the end)


@lru_cache(maxsize=8)
def _probes(dtype: str, lo: int, n: int, rank: int) -> _Probes:
    """The probes of the position check (module docstring); the same for every region of
    one input type and rank. A length's probes are views of the codes twice over (the probe
    starting at code k is `codes2[k:k+length]`), so building them costs no copies."""
    codes = (np.arange(n, dtype=np.int64) + lo).astype(np.dtype(dtype))
    codes2 = np.concatenate([codes, codes])
    lead = (1,) * (rank - 1)
    flat, where, pos = [], [], []
    for off in OFFSETS:
        flat.append(np.concatenate([np.roll(codes, 7)[:off], codes]))
        where.append(f"offset {off}")
        pos.append(flat[-1].astype(np.int64) - lo)
    start = np.arange(n)[:, None]
    for length in LENGTHS:  # every code at every position of this length
        flat += [codes2[k : k + length] for k in range(n)]
        where += [f"length {length}"] * n
        pos.append(((start + np.arange(length)) % n).reshape(-1))
    idx = (np.arange(LONG) + np.arange(LONG) // n) % n
    xs = tuple(x.reshape(lead + (x.size,)) for x in flat)
    long_x = codes[idx].reshape(lead + (LONG,))
    for a in (codes2, *flat, long_x, idx):
        a.setflags(write=False)  # shared by every region's check
    starts = np.concatenate([[0], np.cumsum([x.size for x in flat])])
    starts.setflags(write=False)
    return _Probes(xs, tuple(flat), tuple(where), np.concatenate(pos), long_x, idx, starts)


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
    return CheckedTable(int_tuple(table), str(y0.dtype))


def _check_many(
    merged: Merged,
    sess,
    single,
    codes: np.ndarray,
    lo: int,
    rank: int,
    batched: tuple[Merged, Any] | None = None,
) -> list[CheckedTable | None]:
    """`_check` for the K regions of a merged model at once (its one input fed each probe):
    each region's CheckedTable if all its outputs agree with its table, else None. With
    `batched` (a model of copies of the same regions and its session at ORT's default
    thread count), each length's probes are run that many at a time, copy j fed the j-th."""
    n = codes.size
    p = _probes(codes.dtype.str, lo, n, rank)

    def run(s, x: np.ndarray) -> list[Any]:
        return s.run(None, {PROBE: x})

    x0 = codes.reshape((1,) * (rank - 1) + (n,))
    y0 = _split(merged, run(sess, x0), x0.shape)
    ok = np.array([y is not None for y in y0])
    tables = np.stack([y.astype(np.int64) if y is not None else np.zeros(n, np.int64)
                       for y in y0])  # fmt: skip
    # the tables of an output's regions in that output's own element type, by the regions
    # (`batched`'s outputs may group them in another order): the runs' outputs are compared
    # as they come, not widened to int64 first (equal values are equal in either type)
    native: dict[tuple[int, ...], np.ndarray] = {}

    def native_tables(ks: tuple[int, ...]) -> np.ndarray:
        if ks not in native:
            rows = [tables[k] if (y := y0[k]) is None else y for k in ks]
            native[ks] = np.stack(rows)
        return native[ks]

    starts = p.starts
    # blocks: each offset probe alone, then each length's probes (one length per block)
    bounds = [*range(len(OFFSETS) + 1), *range(len(OFFSETS) + n, len(p.xs) + 1, n)]
    for b, e in pairwise(bounds):
        m, s = batched if batched is not None and e - b > 1 else (merged, sess)
        c = m.copies
        names = [PROBE] if c == 1 else [f"{PROBE}{j}" for j in range(c)]
        assert (e - b) % c == 0, "copies divide a length's probes"
        outs = [s.run(None, dict(zip(names, p.xs[i : i + c], strict=True))) for i in range(b, e, c)]
        pos = p.pos[starts[b] : starts[e]]
        length = int(starts[b + 1] - starts[b])
        shaped = np.ones(len(m.outputs), dtype=bool)  # one probe shape per block
        for o in outs:
            shaped &= _shaped(m, o, p.xs[b].shape)
        for g, (_, ks) in enumerate(m.outputs):
            vals = [np.asarray(o[g]).reshape(-1) for o in outs]
            if not shaped[g] or any(v.size != c * len(ks) * length for v in vals):
                ok[list(ks)] = False  # not elementwise
                continue
            # run r's copy j holds probe b + r*c + j: runs then copies are probe order
            got = np.stack(vals).reshape(e - b, len(ks), length).transpose(1, 0, 2)
            ok[list(ks)] &= (got.reshape(len(ks), -1) == native_tables(ks)[:, pos]).all(axis=1)
    for s in (sess, single):
        for j, y in enumerate(_split(merged, run(s, p.long_x), p.long_x.shape)):
            ok[j] &= y is not None and bool(
                np.array_equal(y.astype(np.int64), tables[j, p.long_pos])
            )
    return [_table_of(y) if ok[j] and y is not None else None for j, y in enumerate(y0)]
