"""Code generation: a `LoweredModel` to a `Program` of NPU instructions and host calls.

Order of work:
1. validate every step (`validate_step`); any issue raises `ValidationError`;
2. infer every tensor's static shape and dtype;
3. emit instructions step by step: DMA of inputs/constants, the parameter record
   and the table (loaded before the MatMul/activation that uses them), the
   compute instruction, DMA of results that the host or the graph output needs;
   sram addresses follow a liveness-aware plan where its ranges are free
   (`npu_backend.sram_plan`), else first fit, spilling residents to dram;
4. check the emitted program (`validate_program`, and the table-slot / parameter-record
   lifetime invariant `npu_backend.lifetime.check_lifetimes`).

Tables: identical tables share one constant and are loaded once while resident;
when every slot is taken, the slot whose table is needed furthest in the future
(or never) is reused (never the slot the current instruction needs). Parameter
records likewise: identical records are loaded once while resident in pmem; when pmem
is full, the resident record needed furthest in the future is evicted.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from . import sram_plan
from .buffers import CodegenError, infer_specs, nbytes
from .isa import (
    Activation,
    Clip,
    Concat,
    DmaIn,
    DmaOut,
    Eltwise,
    HostCall,
    Instruction,
    MatMul,
    MaxPool,
    Move,
    ParamLoad,
    Requant,
    TableLoad,
    record_nbytes,
    strip_tables,
    table_of,
)
from .lifetime import check_lifetimes
from .lowered import (
    HostKernel,
    HostOnnx,
    LoweredModel,
    NpuClip,
    NpuConcat,
    NpuEltwise,
    NpuLut,
    NpuMatMul,
    NpuMaxPool,
    NpuMove,
    NpuRequant,
    Step,
    TensorSpec,
    npu_reads,
    step_reads,
    step_writes,
)
from .postprocess import (
    ColumnPosts,
    Post,
    PostProcess,
    alike_key,
    columns_of,
    posts_but_scale,
)
from .program import Program
from .schedule import (
    ALIGN,
    MatMulSchedule,
    ScheduleError,
    choose_schedule,
    conv_staging,
    resident_fits,
    staging,
    staging_sizes,
)
from .target import Target
from .validate import ValidationError, validate_program, validate_step


def table_key(table: tuple[int, ...]) -> str:
    """Constant name of a table: its content hash (identical tables share one constant)."""
    h = hashlib.sha256(np.asarray(table, dtype=np.int64).tobytes()).hexdigest()[:16]
    return f"table/{h}"


class Allocator:
    """First-fit allocator over one memory of `size` bytes."""

    def __init__(self, name: str, size: int) -> None:
        self.name, self.size = name, size
        self.blocks: dict[str, tuple[int, int]] = {}

    def alloc(self, key: str, n: int, at: int | None = None) -> int:
        """The address of a block of `n` bytes for `key`: at `at` when that range is free
        (a planned address, `npu_backend.sram_plan`), else the first free range that fits."""
        if key in self.blocks:
            return self.blocks[key][0]
        n = max(ALIGN, -(-n // ALIGN) * ALIGN)
        if at is not None and at + n <= self.size and self._free(at, n):
            self.blocks[key] = (at, n)
            return at
        addr = 0
        for a, s in sorted(self.blocks.values()):
            if a - addr >= n:
                break
            addr = max(addr, a + s)
        if addr + n > self.size:
            raise CodegenError(
                f"{self.name} exhausted: {n} bytes for {key!r} do not fit in {self.size} bytes; "
                "use a target with more memory or a smaller model"
            )
        self.blocks[key] = (addr, n)
        return addr

    def free(self, key: str) -> None:
        self.blocks.pop(key, None)

    def _free(self, at: int, n: int) -> bool:
        return all(at + n <= a or a + s <= at for a, s in self.blocks.values())


def _table(st: Step) -> tuple[int, ...] | None:
    if isinstance(st, NpuMatMul):
        return table_of(st.post)
    if isinstance(st, NpuLut):
        return tuple(int(v) for v in st.table)
    if isinstance(st, NpuEltwise) and st.lut is not None and st.lut.table is not None:
        return tuple(int(v) for v in st.lut.table)
    return None


@dataclass
class _Tables:
    """Table-memory slot state during emission."""

    slots: int
    slot_bytes: int
    resident: dict[int, str] = field(default_factory=dict)

    def acquire(self, key: str, future: list[str]) -> tuple[int, bool]:
        """(slot, needs_load) for table `key`; `future` is the table keys used later, in order."""
        for slot, k in self.resident.items():
            if k == key:
                return slot, False
        free = [s for s in range(self.slots) if s not in self.resident]
        if free:
            slot = free[0]
        else:

            def next_use(s: int) -> float:
                k = self.resident[s]
                return future.index(k) if k in future else math.inf

            slot = max(range(self.slots), key=lambda s: (next_use(s), -s))
        self.resident[slot] = key
        return slot, True


def _schedules(
    steps: list[Step], specs: dict[str, TensorSpec | None], target: Target
) -> dict[int, MatMulSchedule]:
    """The schedule of every MatMul step (by index), tiled where its buffers do not fit."""
    sizes = {k: nbytes(v) for k, v in specs.items() if v is not None}
    out = {}
    for i, st in enumerate(steps):
        if not isinstance(st, NpuMatMul):
            continue
        a, w = specs[st.a], specs[st.w]
        assert a is not None and w is not None
        # the rule the compiler's structure pass uses too, so the proven structure is this one
        resident = resident_fits(st, sizes, target)
        try:
            out[i] = choose_schedule(st, a.shape, w.shape[-1], resident, target)
        except ScheduleError as e:
            raise CodegenError(str(e)) from None
    return out


def _records(st: Step, sch: MatMulSchedule | None) -> list[object]:
    """The parameter records step `st` uses, in emission order."""
    if isinstance(st, NpuMatMul):
        if st.post is None:
            return []
        if sch is None or not sch.tiled:
            return [strip_tables(st.post)]
        return [strip_tables(columns_of(st.post, n0, n1)) for n0, n1 in sch.column_groups()]
    if isinstance(st, NpuRequant):
        rqs = st.requant if isinstance(st.requant, tuple) else (st.requant,)
        return [tuple(PostProcess(rq) for rq in rqs)]
    if isinstance(st, NpuEltwise):
        return [st.record]
    return []


def _record_keys(records: list[object]) -> list[object]:
    """Keys equal exactly for equal records: a record itself, but a `ColumnPosts` (and a
    tuple of as many posts, which may equal one) by its `alike_key`, hashed without making
    its posts."""
    lens = {len(r) for r in records if isinstance(r, ColumnPosts)}
    if not lens:
        return records
    out: list[object] = []
    for r in records:
        k = None
        if isinstance(r, ColumnPosts) or (isinstance(r, tuple) and len(r) in lens):
            k = alike_key(cast(Sequence[PostProcess], r))
        out.append(r if k is None else k)
    return out


def check_column_tiles(step: NpuMatMul, sch: MatMulSchedule, emitted: list[MatMul]) -> None:
    """The invariant of a tiled MatMul: its instructions partition the N columns into
    ranges of at most `tn`, and each carries the epilogue and weight zero points of
    exactly its columns (a per-channel scale of another tile is the classic bug).
    Raises `CodegenError` on any violation."""
    n = sch.n
    pos = 0
    for ins in emitted:
        if ins.cols is None:
            raise CodegenError(f"{step.name}: a tiled instruction without a column range")
        n0, n1 = ins.cols
        if n0 != pos or not n0 < n1 <= n or n1 - n0 > sch.tn:
            raise CodegenError(
                f"{step.name}: column tile [{n0}, {n1}) does not continue the partition of "
                f"{n} columns at {pos} in tiles of at most {sch.tn}"
            )
        pos = n1
        want = None if step.post is None else columns_of(step.post, n0, n1)
        if ins.post != want:
            raise CodegenError(
                f"{step.name}: column tile [{n0}, {n1}) carries the epilogue of other columns"
            )
        if ins.w_zp != step.w_zp_columns(n0, n1):
            raise CodegenError(
                f"{step.name}: column tile [{n0}, {n1}) carries the weight zero points of "
                "other columns"
            )
    if pos != n:
        raise CodegenError(f"{step.name}: column tiles cover {pos} of {n} columns")


def generate(lowered: LoweredModel, target: Target) -> Program:
    """Validate `lowered` against `target` and emit a `Program` (raises on any issue)."""
    issues = [i for st in lowered.steps for i in validate_step(st, target)]
    if issues:
        raise ValidationError(issues)
    specs = infer_specs(lowered)
    const_names = set(lowered.constants)
    constants: dict[str, np.ndarray] = {k: np.asarray(v) for k, v in lowered.constants.items()}

    steps = lowered.steps
    last_npu_use: dict[str, int] = {}
    for i, st in enumerate(steps):
        for x in npu_reads(st):
            last_npu_use[x] = i
    table_seq = [table_key(t) if (t := _table(st)) is not None else None for st in steps]
    schedules = _schedules(steps, specs, target)
    record_seq = [r for i, st in enumerate(steps) for r in _records(st, schedules.get(i))]
    # records are compared by value (an equal record still resident is not loaded again):
    # each use's record numbered by its first equal one, hashed once per use (a per-channel
    # record is a tuple of thousands of posts, whose hash a tuple does not keep)
    first_equal: dict[object, int] = {}
    record_ids = [first_equal.setdefault(k, len(first_equal)) for k in _record_keys(record_seq)]
    uses: dict[int, list[int]] = {}  # record number -> the positions it is used at
    for i, rid in enumerate(record_ids):
        uses.setdefault(rid, []).append(i)
    del first_equal

    sram = Allocator("sram", target.memory_size("sram"))
    tiled = frozenset(i for i, sch in schedules.items() if sch.tiled)
    sizes = {k: nbytes(v) for k, v in specs.items() if v is not None}
    planned = sram_plan.plan(steps, sizes, sram.size, tiled)
    wmem = Allocator("wmem", target.memory_size("wmem"))
    pmem = Allocator("pmem", target.memory_size("pmem"))
    tables = _Tables(target.tables.slots, target.tables.slot_bytes)
    in_sram: set[str] = set()
    in_dram: set[str] = {s.name for s in lowered.inputs} | const_names
    loaded_consts: set[str] = set()
    loaded_records: dict[int, str] = {}  # resident record (its number) -> its pmem block key
    record_count = [0]
    prog: list[Instruction] = []
    graph_outputs = set(lowered.outputs)

    def spec(name: str) -> TensorSpec:
        s = specs[name]
        assert s is not None
        return s

    def sram_alloc(name: str, keep: set[str]) -> int:
        """Allocate `name` in sram (at its planned address when free), first spilling
        residents the current step does not use."""
        try:
            return sram.alloc(name, nbytes(spec(name)), planned.get(name))
        except CodegenError:
            for other in sorted(in_sram - keep):
                if other not in in_dram:
                    prog.append(DmaOut(other, sram.blocks[other][0], nbytes(spec(other))))
                    in_dram.add(other)
                sram.free(other)
                in_sram.discard(other)
            return sram.alloc(name, nbytes(spec(name)))

    def to_sram(name: str) -> int:
        if name not in in_sram:
            if name not in in_dram:
                raise CodegenError(f"tensor {name!r} is neither in dram nor in sram")
            addr = sram_alloc(name, {name})
            prog.append(DmaIn(name, "sram", addr, nbytes(spec(name))))
            in_sram.add(name)
        return sram.blocks[name][0]

    def const_to_wmem(name: str | None, keep: set[str | None]) -> None:
        if name is None or name in loaded_consts:
            return
        try:
            addr = wmem.alloc(name, nbytes(spec(name)))
        except CodegenError:  # constants stay in dram: evicting one only costs a reload
            for other in sorted(loaded_consts - keep):
                wmem.free(other)
                loaded_consts.discard(other)
            addr = wmem.alloc(name, nbytes(spec(name)))
        prog.append(DmaIn(name, "wmem", addr, nbytes(spec(name))))
        loaded_consts.add(name)

    def weights_to_wmem(w: str, bias: str | None) -> None:
        """A MatMul's weights and bias in wmem. When the bias finds no range beside the
        weights loaded before it, both are loaded again into an emptied wmem (they fit
        when their aligned sizes do: `memory_issues`)."""
        const_to_wmem(w, {w, bias})
        try:
            const_to_wmem(bias, {w, bias})
        except CodegenError:
            wmem.free(w)  # const_to_wmem dropped every other constant before it failed
            loaded_consts.discard(w)
            const_to_wmem(w, {w, bias})
            const_to_wmem(bias, {w, bias})

    def new_out(name: str, x: str) -> int:
        addr = sram_alloc(name, {name, x})
        in_sram.add(name)
        return addr

    def operands(x: str, out: str) -> tuple[int, int]:
        """sram addresses of a step's input `x` and new output `out`. When `x` sits where
        the free bytes left around it are enough in total but not in one range, `x` is
        stored to dram (if not there yet) and loaded again into an emptied sram: the two
        then always fit when their aligned sizes do (`memory_issues`, checked by lowering)."""
        x_addr = to_sram(x)
        try:
            return x_addr, new_out(out, x)
        except CodegenError:
            to_dram(x)  # new_out spilled every other resident before it failed
            sram.free(x)
            in_sram.discard(x)
            addr = sram.alloc(x, nbytes(spec(x)))
            prog.append(DmaIn(x, "sram", addr, nbytes(spec(x))))
            in_sram.add(x)
            return addr, new_out(out, x)

    def table_key_at(i: int) -> str:
        key = table_seq[i]
        if key is None:
            raise CodegenError(f"{steps[i].name}: step has no table")
        return key

    def load_table(i: int, table: tuple[int, ...]) -> tuple[int, int]:
        key = table_key_at(i)
        if key not in constants:
            constants[key] = np.asarray(table, dtype=np.int64)
        future = [k for k in table_seq[i + 1 :] if k is not None]
        slot, needs_load = tables.acquire(key, future)
        addr = slot * tables.slot_bytes
        if needs_load:
            prog.append(TableLoad(key, slot, addr, tables.slot_bytes))
        return slot, addr

    record_pos = [0]

    def load_record(record) -> int:
        """pmem address of `record`: reused while resident, else loaded, evicting the
        resident record needed furthest in the future (never one needed now)."""
        pos = record_pos[0]
        record_pos[0] += 1
        if record_seq[pos] is not record and record_seq[pos] != record:
            raise CodegenError(f"record order mismatch at use {pos} (codegen bug)")
        rid = record_ids[pos]
        if rid in loaded_records:
            return pmem.blocks[loaded_records[rid]][0]
        n = record_nbytes(record)
        key = f"record{record_count[0]}"
        record_count[0] += 1
        while True:
            try:
                addr = pmem.alloc(key, n)
                break
            except CodegenError:
                if not loaded_records:
                    raise

                def next_use(r: int) -> float:
                    at = uses[r]
                    k = bisect.bisect_right(at, pos)
                    return at[k] if k < len(at) else math.inf

                victim = max(loaded_records, key=next_use)
                pmem.free(loaded_records.pop(victim))
        prog.append(ParamLoad(key, addr, n, record))
        loaded_records[rid] = key
        return addr

    def to_dram(name: str) -> None:
        if name not in in_dram:
            if name not in in_sram:
                raise CodegenError(f"tensor {name!r} is neither in dram nor in sram")
            prog.append(DmaOut(name, sram.blocks[name][0], nbytes(spec(name))))
            in_dram.add(name)

    def stage(mem: Allocator, key: str, n: int, keep: set[str]) -> int:
        """A staging buffer: spill sram residents / drop wmem constants to make room."""
        try:
            return mem.alloc(key, n)
        except CodegenError:
            if mem is sram:
                for other in sorted(in_sram - keep):
                    to_dram(other)
                    sram.free(other)
                    in_sram.discard(other)
            else:
                for other in sorted(loaded_consts):
                    wmem.free(other)
                    loaded_consts.discard(other)
            return mem.alloc(key, n)

    def descriptor(i: int, post: Post | None) -> dict[str, Any]:
        """A MatMul's postprocessing fields for epilogue `post` (its record and table loaded)."""
        if post is None:
            return dict(
                post_enable=False, post=None, param_addr=None, function=None, table_slot=None,
                table_addr=None, intermediate_type=None, out_type="int32", out_zp=0,
            )  # fmt: skip
        param_addr = load_record(strip_tables(post))
        first = posts_but_scale(post)[0]
        table = table_of(post)
        slot, taddr = load_table(i, table) if table is not None else (None, None)
        return dict(
            post_enable=True, post=post, param_addr=param_addr, function=first.function,
            table_slot=slot, table_addr=taddr, intermediate_type=first.intermediate_type,
            out_type=first.output_type, out_zp=first.output_zp,
        )  # fmt: skip

    def emit_tiled(i: int, st: NpuMatMul, sch: MatMulSchedule) -> list[MatMul]:
        """One streamed MatMul per column group; operands and result stay in dram."""
        to_dram(st.a)
        if st.a_zp_input is not None:
            to_dram(st.a_zp_input)
        sz = staging_sizes(st)
        if st.window is not None:
            need = conv_staging(st, spec(st.a).shape, sch.tm, sch.tn)
        else:
            need = staging(sz, sch.tm, sch.tn, sch.tk, sch.k, sch.w_stationary)
        a_addr = stage(sram, f"stage:{st.name}", need["sram"], set())
        w_addr = stage(wmem, f"stage:{st.name}", need["wmem"], set()) if need["wmem"] else 0
        out_spec = spec(st.out)
        emitted = []
        for n0, n1 in sch.column_groups():
            post = None if st.post is None else columns_of(st.post, n0, n1)
            ins = MatMul(
                name=st.name,
                a=st.a,
                w=st.w,
                bias=st.bias,
                out=st.out,
                a_zp=int(st.a_zp),
                w_zp=st.w_zp_columns(n0, n1),
                a_type=st.a_type,
                w_type=st.w_type,
                a_addr=a_addr,
                out_addr=a_addr,
                **descriptor(i, post),
                structure=sch.structure,
                cols=(n0, n1),
                tile=sch.tile,
                w_addr=w_addr,
                w_stationary=sch.w_stationary,
                window=st.window,
                unit="Pool" if st.compute == "Pool" else None,
                a_zp_input=st.a_zp_input,
            )
            prog.append(ins)
            emitted.append(ins)
        sram.free(f"stage:{st.name}")
        wmem.free(f"stage:{st.name}")
        in_dram.add(out_spec.name)
        return emitted

    def emit_eltwise(i: int, st: NpuEltwise) -> Eltwise:
        """Both operands and the result in sram at once (the second operand may be the
        first), the record in pmem, the fused table (if any) in tmem."""
        keep = {st.a, st.b, st.out}
        addrs = {}
        for x in dict.fromkeys((st.a, st.b)):
            if x not in in_sram:
                if x not in in_dram:
                    raise CodegenError(f"tensor {x!r} is neither in dram nor in sram")
                addr = sram_alloc(x, keep)
                prog.append(DmaIn(x, "sram", addr, nbytes(spec(x))))
                in_sram.add(x)
            addrs[x] = sram.blocks[x][0]
        out_addr = sram_alloc(st.out, keep)
        in_sram.add(st.out)
        param_addr = load_record(st.record)
        slot = taddr = None
        table_name = None
        if st.lut is not None and st.lut.table is not None:
            slot, taddr = load_table(i, tuple(int(v) for v in st.lut.table))
            table_name = table_key_at(i)
        return Eltwise(
            name=st.name, a=st.a, b=st.b, out=st.out, a_addr=addrs[st.a], b_addr=addrs[st.b],
            out_addr=out_addr, param_addr=param_addr, record=st.record, table=table_name,
            table_slot=slot, table_addr=taddr, function=st.function, out_type=st.out_type,
            index_order=st.lut.index_order if st.lut is not None and st.lut.index_order else "offset",
        )  # fmt: skip

    for i, st in enumerate(steps):
        if isinstance(st, NpuMatMul) and schedules[i].tiled:
            emitted = emit_tiled(i, st, schedules[i])
            check_column_tiles(st, schedules[i], emitted)
            for name in list(in_sram):
                if last_npu_use.get(name, -1) <= i:
                    sram.free(name)
                    in_sram.discard(name)
            continue
        if isinstance(st, NpuMatMul):
            if st.a_zp_input is not None:
                to_dram(st.a_zp_input)  # the instruction reads its zero point from dram
            if st.w_input:
                to_dram(st.w)  # a run-time operand goes to wmem from dram, as weights do
            a_addr, out_addr = operands(st.a, st.out)
            weights_to_wmem(st.w, st.bias)
            fields = descriptor(i, st.post)
            prog.append(
                MatMul(
                    name=st.name,
                    a=st.a,
                    w=st.w,
                    bias=st.bias,
                    out=st.out,
                    a_zp=int(st.a_zp),
                    w_zp=st.w_zp,
                    a_type=st.a_type,
                    w_type=st.w_type,
                    a_addr=a_addr,
                    out_addr=out_addr,
                    **fields,
                    structure=st.structure,
                    window=st.window,
                    unit="Pool" if st.compute == "Pool" else None,
                    a_zp_input=st.a_zp_input,
                    w_input=st.w_input,
                )
            )
        elif isinstance(st, NpuLut):
            x_addr, out_addr = operands(st.x, st.out)
            slot, taddr = load_table(i, tuple(int(v) for v in st.table))
            prog.append(
                Activation(
                    name=st.name,
                    x=st.x,
                    out=st.out,
                    x_addr=x_addr,
                    out_addr=out_addr,
                    table=table_key_at(i),
                    table_slot=slot,
                    table_addr=taddr,
                    in_type=st.in_type,
                    out_type=st.out_type,
                    index_order=st.index_order,
                    function=st.function,
                )
            )
        elif isinstance(st, NpuRequant):
            x_addr, out_addr = operands(st.x, st.out)
            rqs = st.requant if isinstance(st.requant, tuple) else (st.requant,)
            param_addr = load_record(tuple(PostProcess(rq) for rq in rqs))
            prog.append(Requant(st.name, st.x, st.out, x_addr, out_addr, param_addr, st.requant))
        elif isinstance(st, NpuClip):
            x_addr, out_addr = operands(st.x, st.out)
            prog.append(Clip(st.name, st.x, st.out, x_addr, out_addr, st.lo, st.hi, st.dtype))
        elif isinstance(st, NpuEltwise):
            prog.append(emit_eltwise(i, st))
        elif isinstance(st, NpuConcat):
            keep = {*st.xs, st.out}
            for x in st.xs:
                if x not in in_sram:
                    if x not in in_dram:
                        raise CodegenError(f"tensor {x!r} is neither in dram nor in sram")
                    a = sram_alloc(x, keep)
                    prog.append(DmaIn(x, "sram", a, nbytes(spec(x))))
                    in_sram.add(x)
            out_addr = sram_alloc(st.out, keep)
            in_sram.add(st.out)
            addrs = [sram.blocks[x][0] for x in st.xs]  # none moved: all were kept
            prog.append(
                Concat(st.name, tuple(st.xs), st.out, tuple(addrs), out_addr, st.axis, st.dtype)
            )
        elif isinstance(st, NpuMaxPool):
            x_addr, out_addr = operands(st.x, st.out)
            prog.append(MaxPool(st.name, st.x, st.out, x_addr, out_addr, st.window, st.dtype))
        elif isinstance(st, NpuMove):
            x_addr, out_addr = operands(st.x, st.out)
            prog.append(
                Move(
                    st.name, st.x, st.out, x_addr, out_addr, tuple(st.shape), tuple(st.strides),
                    int(st.offset), st.dtype,
                )
            )  # fmt: skip
        else:
            prog.append(HostCall(st.name, st))
            in_dram.update(step_writes(st))
            for o in step_writes(st):
                in_sram.discard(o)
                sram.free(o)
            continue
        # NPU step done: results needed by the host or as graph outputs go back to dram.
        out = st.out
        later_host = any(
            out in step_reads(s) for s in steps[i + 1 :] if isinstance(s, HostKernel | HostOnnx)
        )
        if out in graph_outputs or later_host:
            prog.append(DmaOut(out, sram.blocks[out][0], nbytes(spec(out))))
            in_dram.add(out)
        for name in list(in_sram):
            if last_npu_use.get(name, -1) <= i and name != out:
                sram.free(name)
                in_sram.discard(name)
        if last_npu_use.get(out, -1) <= i:
            sram.free(out)
            in_sram.discard(out)

    tensors = {k: v for k, v in specs.items() if v is not None and k not in constants}
    program = Program(
        target=target.name,
        inputs=list(lowered.inputs),
        outputs=list(lowered.outputs),
        tensors=tensors,
        constants=constants,
        instructions=prog,
        dynamic_batch=tuple(getattr(lowered, "dynamic_batch", ())),
    )
    issues = validate_program(program, target)
    if issues:
        raise ValidationError(issues)
    check_lifetimes(program, target.tables.slots)
    return program
