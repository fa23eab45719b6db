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

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prover.domain import KernelError
from prover.inttypes import INT32, int_type
from prover.matmul import accumulator_range, check_fits_int32

from . import sram_plan
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
from .postprocess import Post, PostProcess, columns_of, posts_of
from .program import Program
from .schedule import (
    ALIGN,
    MatMulSchedule,
    ScheduleError,
    aligned,
    choose_schedule,
    conv_staging,
    resident_fits,
    smallest_tile_fits,
    staging,
    staging_sizes,
    tiling_allowed,
)
from .target import Target
from .validate import ValidationError, ValidationIssue, validate_program, validate_step


class CodegenError(ValueError):
    """The lowered model cannot be turned into a program (shapes, memory exhausted, ...)."""


def storage_dtype(type_name: str) -> str:
    """numpy dtype name of an integer type name ("int8" -> "int8", "int4" -> "int8")."""
    return int_type(type_name).numpy_dtype().name


def nbytes(spec: TensorSpec) -> int:
    return int(math.prod(spec.shape)) * spec.numpy_dtype.itemsize


def memory_issues(
    step: Step,
    sizes: Mapping[str, int],
    target: Target,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> list[ValidationIssue]:
    """Why the buffers `step` needs at once cannot fit the target's memories (empty if they fit).

    An NPU step reads its input and writes its output in sram at the same time; a
    MatMul's weights and bias sit in wmem. `sizes` gives bytes per tensor name (names
    missing from it count 0). Host steps need no NPU memory. Codegen spills other
    resident tensors to dram (and moves the step's own input when the free bytes are in
    pieces), so a step that passes this check always gets its buffers.
    A MatMul whose resident buffers do not fit passes when the target can tile it and a
    one-MAC-block tile fits (codegen then tiles it: `npu_backend.schedule`); a conv over a
    window when one output row of it fits, for the tensor shapes in `shapes`.
    """
    sram_names: list[str | None]
    wmem_names: list[str | None]
    if isinstance(step, NpuMatMul):
        sram_names, wmem_names = [step.a, step.out], [step.w, step.bias]
    elif isinstance(step, NpuLut | NpuRequant | NpuClip | NpuMove | NpuMaxPool):
        sram_names, wmem_names = [step.x, step.out], []
    elif isinstance(step, NpuEltwise):
        sram_names, wmem_names = [step.a, step.b, step.out], []
    elif isinstance(step, NpuConcat):
        sram_names, wmem_names = [*step.xs, step.out], []
    else:
        return []
    issues = _resident_issues(step.name, sram_names, wmem_names, sizes, target)
    if issues and isinstance(step, NpuMatMul):
        if tiling_allowed(step, target) and smallest_tile_fits(step, target, shapes):
            return []  # codegen tiles it (npu_backend.schedule)
        why = (
            "and its staging buffers do not fit either"
            if tiling_allowed(step, target)
            else f"and {'a fused ' if step.fused else ''}{step.compute} cannot be tiled on "
            f"this target (structures {sorted(_caps_structures(step, target))})"
        )
        issues = [ValidationIssue(i.code, i.step, f"{i.message}, {why}") for i in issues]
    return issues


def _caps_structures(step: NpuMatMul, target: Target) -> frozenset[str]:
    caps = target.compute(step.compute)
    if caps is None:
        return frozenset()
    return caps.fused_structures if step.fused else caps.structures


def _resident_issues(
    name: str,
    sram_names: list[str | None],
    wmem_names: list[str | None],
    sizes: Mapping[str, int],
    target: Target,
) -> list[ValidationIssue]:
    issues = []
    for mem, names in (("sram", sram_names), ("wmem", wmem_names)):
        need = {n: sizes.get(n, 0) for n in dict.fromkeys(x for x in names if x is not None)}
        total = sum(aligned(b) for b in need.values() if b)
        have = target.memory_size(mem)
        if total > have:
            parts = " + ".join(f"{n!r} {b}" for n, b in need.items())
            issues.append(
                ValidationIssue(
                    "buffers_exceed_memory",
                    name,
                    f"its {mem} buffers ({parts} bytes, {total} aligned) exceed the target's "
                    f"{mem} of {have} bytes",
                )
            )
    return issues


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


# --- shape inference --------------------------------------------------------------------


def infer_specs(model: LoweredModel) -> dict[str, TensorSpec | None]:
    """Static spec of every tensor (None for a host output without a declared spec)."""
    specs: dict[str, TensorSpec | None] = {s.name: s for s in model.inputs}
    for name, arr in model.constants.items():
        specs[name] = TensorSpec(name, np.asarray(arr).dtype.name, tuple(np.shape(arr)))

    def need(name: str, step: Step) -> TensorSpec:
        if name not in specs:
            raise CodegenError(f"{step.name}: input {name!r} is not produced before this step")
        s = specs[name]
        if s is None:
            raise CodegenError(
                f"{step.name}: the shape of host output {name!r} is unknown; give the HostOnnx "
                "step output_specs"
            )
        return s

    for st in model.steps:
        if isinstance(st, NpuMatMul):
            a = need(st.a, st)
            w = need(st.w, st)
            if st.a_zp_input is not None:
                z = need(st.a_zp_input, st)
                if z.dtype != st.a_type or int(np.prod(z.shape)) != 1:
                    raise CodegenError(
                        f"{st.name}: zero point {z.name!r} is {z.dtype}{list(z.shape)}, "
                        f"the MatMul reads one {st.a_type}"
                    )
            n = w.shape[1] if len(w.shape) == 2 else 0
            out_lead = a.shape[:-1]
            if st.w_input:  # both operands computed at run time: a batched product
                if (
                    len(w.shape) < 2
                    or len(a.shape) < 2
                    or a.shape[-1] != w.shape[-2]
                    or (len(w.shape) > 2 and w.shape[:-2] != a.shape[:-2])
                    or st.window is not None
                ):
                    raise CodegenError(f"{st.name}: a {a.shape} and w {w.shape} do not multiply")
                n = w.shape[-1]
            elif st.window is not None:
                win = st.window
                taps = int(np.prod(win.kernel))
                if (
                    len(w.shape) != 2
                    or len(a.shape) != win.rank + 2
                    or w.shape[0] % taps
                    or a.shape[-1] != w.shape[0] // taps * win.group
                    or n % win.group
                ):
                    raise CodegenError(f"{st.name}: a {a.shape} and w {w.shape} do not fit {win}")
                try:
                    out_lead = a.shape[:1] + win.out_spatial(tuple(a.shape[1:-1]))
                except KernelError as e:
                    raise CodegenError(f"{st.name}: {e}") from None
            elif len(w.shape) != 2 or a.shape[-1] != w.shape[0]:
                raise CodegenError(f"{st.name}: a {a.shape} and w {w.shape} do not multiply")
            if isinstance(st.post, tuple) and len(st.post) != n:
                raise CodegenError(f"{st.name}: {len(st.post)} column epilogues for {n} columns")
            if isinstance(st.w_zp, tuple) and len(st.w_zp) != n:
                raise CodegenError(f"{st.name}: {len(st.w_zp)} weight zero points for {n} columns")
            if st.bias is not None and need(st.bias, st).shape != (n,):
                raise CodegenError(f"{st.name}: bias must have shape ({n},)")
            _check_operands(st, a, model.constants, w)
            out_t = posts_of(st.post)[0].output_type if st.post is not None else "int32"
            specs[st.out] = TensorSpec(st.out, storage_dtype(out_t), out_lead + (n,))
        elif isinstance(st, NpuLut):
            x = need(st.x, st)
            specs[st.out] = TensorSpec(st.out, storage_dtype(st.out_type), x.shape)
        elif isinstance(st, NpuRequant):
            x = need(st.x, st)
            rq = st.requant[0] if isinstance(st.requant, tuple) else st.requant
            specs[st.out] = TensorSpec(st.out, storage_dtype(rq.out_type), x.shape)
        elif isinstance(st, NpuClip):
            x = need(st.x, st)
            specs[st.out] = TensorSpec(st.out, storage_dtype(st.dtype), x.shape)
        elif isinstance(st, NpuEltwise):
            a, b = need(st.a, st), need(st.b, st)
            try:
                shape = tuple(int(d) for d in np.broadcast_shapes(a.shape, b.shape))
            except ValueError:
                raise CodegenError(
                    f"{st.name}: a {a.shape} and b {b.shape} do not broadcast"
                ) from None
            for x in (a, b):
                if np.dtype(x.dtype) != int_type(st.record.dtype).numpy_dtype():
                    raise CodegenError(
                        f"{st.name}: input {x.name!r} is {x.dtype}, the unit reads {st.record.dtype}"
                    )
            specs[st.out] = TensorSpec(st.out, storage_dtype(st.out_type), shape)
        elif isinstance(st, NpuConcat):
            parts = [need(x, st) for x in st.xs]
            joined = list(parts[0].shape)
            rest = [d for i, d in enumerate(joined) if i != st.axis]
            for p in parts:
                same = len(p.shape) == len(joined) and rest == [
                    d for i, d in enumerate(p.shape) if i != st.axis
                ]
                if not same or np.dtype(p.dtype) != np.dtype(storage_dtype(st.dtype)):
                    raise CodegenError(f"{st.name}: input {p.name!r} {p.shape} does not join")
            joined[st.axis] = sum(p.shape[st.axis] for p in parts)
            specs[st.out] = TensorSpec(st.out, storage_dtype(st.dtype), tuple(joined))
        elif isinstance(st, NpuMaxPool):
            x = need(st.x, st)
            if np.dtype(x.dtype) != np.dtype(storage_dtype(st.dtype)):
                raise CodegenError(f"{st.name}: pools {x.dtype} {st.x!r} as {st.dtype}")
            try:
                sp = st.window.out_spatial(tuple(x.shape[1:-1]))
            except KernelError as e:
                raise CodegenError(f"{st.name}: {e}") from None
            specs[st.out] = TensorSpec(st.out, x.dtype, (x.shape[0], *sp, x.shape[-1]))
        elif isinstance(st, NpuMove):
            x = need(st.x, st)
            if np.dtype(x.dtype) != np.dtype(storage_dtype(st.dtype)):
                raise CodegenError(f"{st.name}: moves {x.dtype} {st.x!r} as {st.dtype}")
            reach = [(d - 1) * s for d, s in zip(st.shape, st.strides, strict=True)]
            last = st.offset + sum(r for r in reach if r > 0)
            first = st.offset + sum(r for r in reach if r < 0)
            if int(np.prod(st.shape)) and (first < 0 or last >= int(np.prod(x.shape))):
                raise CodegenError(f"{st.name}: gathers outside {st.x!r} {x.shape}")
            specs[st.out] = TensorSpec(st.out, storage_dtype(st.dtype), tuple(st.shape))
        elif isinstance(st, HostKernel):
            known = [s for i in st.inputs if (s := specs.get(i)) is not None]
            shape = None
            if len(known) == len(st.inputs):
                shape = np.broadcast_shapes(*(s.shape for s in known))
            specs[st.out] = None if shape is None else TensorSpec(st.out, st.out_dtype, shape)
        elif isinstance(st, HostOnnx):
            given = {s.name: s for s in st.output_specs}
            for o in st.outputs:
                specs[o] = given.get(o)
    for o in model.outputs:
        if o not in specs:
            raise CodegenError(f"graph output {o!r} is never produced")
    return specs


def _check_run_time_operands(st: NpuMatMul, a: TensorSpec, w: TensorSpec | None) -> None:
    """Both operands computed at run time: types, zero points, and an accumulator that
    fits int32 for every value of both types (K products, each at a corner of the box)."""
    at, wt = int_type(st.a_type), int_type(st.w_type)
    if w is None or np.dtype(w.dtype) != wt.numpy_dtype():
        raise CodegenError(f"{st.name}: operand {st.w!r} is not {wt.name}")
    if st.a_zp_input is not None or np.ndim(st.w_zp) or st.bias is not None:
        raise CodegenError(f"{st.name}: two run-time operands take constant scalar zero points")
    if not at.contains(int(st.a_zp)) or not wt.contains(int(st.w_zp)):  # type: ignore[arg-type]
        raise CodegenError(f"{st.name}: zero point outside its operand type")
    za, zw = int(st.a_zp), int(st.w_zp)  # type: ignore[arg-type]
    corners = [(x - za) * (y - zw) for x in (at.min, at.max) for y in (wt.min, wt.max)]
    k = int(a.shape[-1])
    lo, hi = k * min(corners), k * max(corners)
    if lo < INT32.min or hi > INT32.max:
        raise CodegenError(
            f"{st.name} accumulator range [{lo}, {hi}] may leave int32; the NPU accumulates in "
            "int32 (split K or keep it on the host)"
        )


def _check_operands(
    st: NpuMatMul, a: TensorSpec, constants: dict[str, np.ndarray], w_spec: TensorSpec | None = None
) -> None:
    """Operand types and zero points in range, and an accumulator that provably fits int32."""
    at, wt = int_type(st.a_type), int_type(st.w_type)
    if np.dtype(a.dtype) != at.numpy_dtype():
        raise CodegenError(f"{st.name}: input {st.a!r} is {a.dtype}, the MatMul expects {at.name}")
    if st.w_input:
        _check_run_time_operands(st, a, w_spec)
        return
    # the IR's narrow integer weights as they are: an int64 copy of a large conv's weights
    # was 8x their size (resnet18: 19 MB, and accumulator_range made two more of it)
    w = np.asarray(constants[st.w])
    if w.dtype.kind not in "iu":
        raise CodegenError(f"{st.name}: weights are {w.dtype}, not integers")
    wzp = np.asarray(st.w_zp, dtype=np.int64)
    if w.size and (int(w.min()) < wt.min or int(w.max()) > wt.max):
        raise CodegenError(f"{st.name}: weights outside {wt.name}")
    if not at.contains(int(st.a_zp)) or wzp.min() < wt.min or wzp.max() > wt.max:
        raise CodegenError(f"{st.name}: zero point outside its operand type")
    bias = None if st.bias is None else constants[st.bias]
    # a run-time zero point may be any value of the type: the range at each end of it
    # bounds every other (the accumulator is linear in the zero point)
    zps = (int(st.a_zp),) if st.a_zp_input is None else (at.min, at.max)
    try:
        for zp in zps:
            check_fits_int32(accumulator_range(w, wzp, at, zp, bias), f"{st.name} accumulator")
    except KernelError as e:
        raise CodegenError(
            f"{e}; the NPU accumulates in int32 (split K or keep it on the host)"
        ) from None


# --- emission ---------------------------------------------------------------------------


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
    loaded_records: dict[object, str] = {}  # resident record -> its pmem block key
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
        if record_seq[pos] != record:
            raise CodegenError(f"record order mismatch at use {pos} (codegen bug)")
        if record in loaded_records:
            return pmem.blocks[loaded_records[record]][0]
        n = record_nbytes(record)
        key = f"record{record_count[0]}"
        record_count[0] += 1
        future = record_seq[pos + 1 :]
        while True:
            try:
                addr = pmem.alloc(key, n)
                break
            except CodegenError:
                if not loaded_records:
                    raise

                def next_use(r) -> float:
                    return future.index(r) if r in future else math.inf

                victim = max(loaded_records, key=next_use)
                pmem.free(loaded_records.pop(victim))
        prog.append(ParamLoad(key, addr, n, record))
        loaded_records[record] = key
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
        first = posts_of(post)[0]
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
