"""A bit-exact simulator of NPU programs with traffic counters.

Values follow the kernel's concrete semantics (each instruction's semantics in
`npu_backend.isa`), evaluated strictly: an input where a primitive's precondition
fails (the hardware result is undefined) raises `UndefinedResult`. The simulator keeps each memory's contents separately, so a
program that reads a tensor before its DMA, or uses a table slot or parameter
record that was never loaded, fails with `SimulatorError` instead of computing.

Counted per memory (dram, sram, wmem, pmem, tmem): bytes read and written and peak
bytes live (a tensor is live from its write until its last read before it is written
again; a tiled MatMul's staging buffers while it runs; loaded parameter records; loaded
table slots); dram re-reads of weights (constants) and of inputs (other tensors): bytes
read beyond each tensor's size; table loads, parameter loads, MatMul tiles, instructions
(total and per opcode), host calls; and cycles.

Cycle model (the target's `[schedule]`, `npu_backend.target.Schedule`; instructions run
one after another, nothing overlaps across instructions):
- every NPU instruction pays `launch_cycles`; a host call costs no NPU cycles;
- a transfer of n bytes between two memories takes ceil(n / min(bandwidth of each));
  DmaIn/DmaOut are one transfer; TableLoad/ParamLoad add `table_load_cycles` /
  `param_load_cycles` to their dram -> tmem/pmem transfer;
- a MatMul tile of tm x tn outputs over tk products computes in
  ceil(tm/mac_m) * ceil(tn/mac_n) * ceil(tk/mac_k) * cycles_per_mac_block cycles, plus
  ceil(tm*tn / mac_n) cycles of postprocessing after its last K tile; its DMA (input and
  weight tiles in, the output tile out; none for a plain MatMul, whose operands are
  resident) is one transfer between dram and sram. A tile costs max(compute, dma) when
  the target overlaps DMA with compute (`dma_overlap`), else compute + dma;
- Activation, Requant, Clip and Eltwise process mac_n elements per cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, overload

import numpy as np

from prover.conv import conv_acc, row_tile
from prover.domain import NUMPY, KernelError
from prover.errors import BadInput
from prover.inttypes import int_type
from prover.terms import PreconditionViolation, evaluate

from .exact_matmul import exact_matmul
from .host import HostError, HostInputError, run_host, store
from .host_batch import moves_data_only, widened
from .isa import (
    MEMORY_NAMES,
    Activation,
    Clip,
    Concat,
    DmaIn,
    DmaOut,
    Eltwise,
    HostCall,
    MatMul,
    MaxPool,
    Move,
    ParamLoad,
    Requant,
    TableLoad,
    strip_tables,
)
from .lowered import HostKernel, HostOnnx, dtype_name, numpy_dtype
from .postprocess import apply_columns, per_column
from .program import Program
from .schedule import ACC_BYTES
from .target import Schedule, Target

TABLE_ENTRY_BYTES = 1  # table entries are int8/uint8


class SimulatorError(RuntimeError):
    """The program cannot execute (bad inputs, or it uses state it never set up)."""


class SimulatorInputError(SimulatorError, BadInput, ValueError):
    """The inputs given to `run` do not match the program's inputs (user error)."""


class UndefinedResult(SimulatorError):
    """An instruction met an input where its semantics' precondition fails (e.g. the
    fixed-point requantizer's left shift overflowing int32): the hardware result is
    undefined, so the simulator refuses instead of computing a value."""


@dataclass
class InstructionCost:
    """What one executed instruction cost: its cycles and bytes moved per memory."""

    index: int
    opcode: str
    name: str
    cycles: int
    bytes_read: dict[str, int]
    bytes_written: dict[str, int]
    # bytes live per memory while it ran (its own high-water mark; `Counters.peak_bytes`
    # is the maximum of these over the run)
    live_bytes: dict[str, int] = field(default_factory=dict)


@dataclass
class Counters:
    """Traffic, liveness, instruction and cycle counts of one run (see the module doc)."""

    bytes_read: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MEMORY_NAMES, 0))
    bytes_written: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MEMORY_NAMES, 0))
    table_loads: int = 0
    param_loads: int = 0
    instructions: int = 0
    host_calls: int = 0
    by_opcode: dict[str, int] = field(default_factory=dict)
    peak_bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MEMORY_NAMES, 0))
    weight_reread_bytes: int = 0  # dram bytes of constants read beyond each one's size
    input_reread_bytes: int = 0  # the same for non-constant tensors (activations, inputs)
    matmul_tiles: int = 0
    cycles: int = 0
    cycles_by_opcode: dict[str, int] = field(default_factory=dict)
    # one entry per executed instruction, in order (not in `to_json`)
    per_instruction: list[InstructionCost] = field(default_factory=list)

    def read(self, mem: str, n: int) -> None:
        self.bytes_read[mem] += int(n)

    def write(self, mem: str, n: int) -> None:
        self.bytes_written[mem] += int(n)

    def to_json(self) -> dict[str, Any]:
        return {
            "bytes_read": dict(self.bytes_read),
            "bytes_written": dict(self.bytes_written),
            "table_loads": self.table_loads,
            "param_loads": self.param_loads,
            "instructions": self.instructions,
            "host_calls": self.host_calls,
            "by_opcode": dict(sorted(self.by_opcode.items())),
            "peak_bytes": dict(self.peak_bytes),
            "weight_reread_bytes": self.weight_reread_bytes,
            "input_reread_bytes": self.input_reread_bytes,
            "matmul_tiles": self.matmul_tiles,
            "cycles": self.cycles,
            "cycles_by_opcode": dict(sorted(self.cycles_by_opcode.items())),
        }


def _batched(shape: tuple[int, ...], rows: int | None) -> tuple[int, ...]:
    """`shape` with its one-row leading dimension widened to `rows` (batched runs)."""
    if rows is None or not shape or shape[0] != 1:
        return tuple(shape)
    return (rows, *shape[1:])


def _check_inputs(
    program: Program, inputs: dict[str, np.ndarray], rows: int | None = None
) -> dict[str, np.ndarray]:
    out = {}
    for spec in program.inputs:
        if spec.name not in inputs:
            raise SimulatorInputError(f"missing input {spec.name!r}")
        arr = np.asarray(inputs[spec.name])
        want = _batched(spec.shape, rows if spec.name in program.dynamic_batch else None)
        if tuple(arr.shape) != want:
            raise SimulatorInputError(
                f"input {spec.name!r} has shape {tuple(arr.shape)}, expected {tuple(spec.shape)}"
            )
        dt = numpy_dtype(spec.dtype)
        if spec.dtype == "string":
            if arr.dtype.kind not in "OU":
                raise SimulatorInputError(f"input {spec.name!r} must be an array of strings")
            arr = arr.astype(object)
        elif dt.kind in "iu":
            if arr.dtype.kind not in "iu":
                raise SimulatorInputError(
                    f"input {spec.name!r} must be an integer array ({dt.name})"
                )
            try:
                arr = store(arr, dt.name, f"input {spec.name!r}")
            except HostError as e:
                raise SimulatorInputError(str(e)) from None
        elif arr.dtype != dt:
            raise SimulatorInputError(
                f"input {spec.name!r} has dtype {arr.dtype}, expected {dt.name}"
            )
        out[spec.name] = arr
    extra = set(inputs) - {s.name for s in program.inputs}
    if extra:
        raise SimulatorInputError(f"unknown input(s) {sorted(extra)}")
    return out


def _transfer(sch: Schedule, src: str, dst: str, n: int) -> int:
    """Cycles to move `n` bytes from memory `src` to `dst`."""
    return -(-int(n) // min(sch.bandwidth(src), sch.bandwidth(dst))) if n else 0


def _mac_cycles(sch: Schedule, m: int, n: int, k: int) -> int:
    blocks = -(-m // sch.mac_m) * -(-n // sch.mac_n) * -(-k // sch.mac_k)
    return blocks * sch.cycles_per_mac_block


ON_CHIP = ("sram", "wmem")


def _events(ins: Any) -> list[tuple[str, str, str]]:
    """(memory, tensor, "r" | "w") of an instruction on the on-chip tensor memories."""
    if isinstance(ins, DmaIn):
        return [(ins.dst, ins.tensor, "w")]
    if isinstance(ins, DmaOut):
        return [("sram", ins.tensor, "r")]
    if isinstance(ins, MatMul):
        if ins.tile is not None:
            return []
        ev = [("sram", ins.a, "r"), ("wmem", ins.w, "r")]
        ev += [("wmem", ins.bias, "r")] if ins.bias is not None else []
        return ev + [("sram", ins.out, "w")]
    if isinstance(ins, Activation | Requant | Clip | Move | MaxPool):
        return [("sram", ins.x, "r"), ("sram", ins.out, "w")]
    if isinstance(ins, Eltwise):
        return [("sram", ins.a, "r"), ("sram", ins.b, "r"), ("sram", ins.out, "w")]
    if isinstance(ins, Concat):
        return [("sram", x, "r") for x in ins.xs] + [("sram", ins.out, "w")]
    return []


def _drops(instructions: list[Any]) -> list[list[tuple[str, str]]]:
    """Per instruction, the on-chip tensors dead after it (no later read before a rewrite)."""
    per: list[list[tuple[str, str, str]]] = [_events(i) for i in instructions]
    drops: list[list[tuple[str, str]]] = [[] for _ in instructions]
    next_kind: dict[tuple[str, str], str] = {}
    for idx in range(len(instructions) - 1, -1, -1):
        keys = list(dict.fromkeys((mem, name) for mem, name, _ in per[idx]))
        drops[idx] = [key for key in keys if next_kind.get(key, "w") == "w"]
        reads = {(mem, name) for mem, name, kind in per[idx] if kind == "r"}
        for key in keys:  # an instruction that reads a tensor needs it live before it runs
            next_kind[key] = "r" if key in reads else "w"
    return drops


@lru_cache(maxsize=16)
def _shipped_schedule(name: str) -> Schedule:
    from .target import load_target, shipped_targets

    path = shipped_targets().get(name)
    return Schedule() if path is None else load_target(path).schedule


class Machine:
    """Memory state of one run."""

    def __init__(
        self,
        program: Program,
        inputs: dict[str, np.ndarray],
        rows: int | None = None,
        schedule: Schedule | None = None,
        host_results: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        self.program = program
        self.rows = rows  # a batched run: row tensors hold `rows` rows instead of one
        # host ONNX outputs given instead of run (a one-row replay of a batched run)
        self.host_results = host_results
        # row tensors ONNX Runtime returned with the batch on a later axis (e.g. [1, B]):
        # kept with the batch leading (the same data in row-major order), fed back as ORT's
        self.layout: dict[str, tuple[int, ...]] = {}
        self.schedule = schedule if schedule is not None else _shipped_schedule(program.target)
        self.mem: dict[str, dict[str, np.ndarray]] = {"dram": {}, "sram": {}, "wmem": {}}
        self.mem["dram"].update({k: np.asarray(v) for k, v in program.constants.items()})
        self.mem["dram"].update(inputs)
        self.tmem: dict[int, tuple[int, ...]] = {}
        self.pmem: dict[int, Any] = {}
        self.pmem_end: dict[int, int] = {}  # record address -> end of its byte range
        self.c = Counters()
        self.live: dict[str, dict[str, int]] = {m: {} for m in ON_CHIP}
        self.dram_reads: dict[str, int] = {}
        self.partial: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # tiled outputs in progress
        self.drops = _drops(program.instructions)
        self._index = 0  # of the next instruction `step` runs
        self._cycles = 0
        self._staging: dict[str, int] = {}

    @overload
    def get(self, mem: str, name: str, who: str) -> np.ndarray: ...
    @overload
    def get(self, mem: str, name: None, who: str) -> None: ...
    @overload
    def get(self, mem: str, name: str | None, who: str) -> np.ndarray | None: ...
    def get(self, mem: str, name: str | None, who: str) -> np.ndarray | None:
        if name is None:
            return None
        try:
            return self.mem[mem][name]
        except KeyError:
            raise SimulatorError(f"{who}: tensor {name!r} is not in {mem}") from None

    def dram_read(self, name: str, n: int) -> None:
        """Count `n` bytes of tensor `name` read from dram (re-reads beyond its size too)."""
        self.c.read("dram", n)
        before = self.dram_reads.get(name, 0)
        self.dram_reads[name] = before + int(n)
        arr = self.mem["dram"].get(name)
        size = 0 if arr is None else arr.nbytes
        extra = max(0, before + int(n) - size) - max(0, before - size)
        if name in self.program.constants:
            self.c.weight_reread_bytes += extra
        else:
            self.c.input_reread_bytes += extra

    def put(self, name: str, values: Any, dtype: str, who: str) -> np.ndarray:
        arr = self._store(values, dtype, who)
        self.mem["sram"][name] = arr
        self.live["sram"][name] = arr.nbytes
        self.c.write("sram", arr.nbytes)
        return arr

    def table(self, slot: int | None, who: str) -> tuple[int, ...]:
        if slot not in self.tmem:
            raise SimulatorError(f"{who}: table slot {slot} was never loaded")
        return self.tmem[slot]

    def step(self, ins: Any) -> InstructionCost:
        """Run the program's next instruction `ins` and account its cycles and liveness
        (instructions must be stepped in program order); returns what it cost."""
        idx = self._index
        self._index += 1
        c = self.c
        before_r, before_w = dict(c.bytes_read), dict(c.bytes_written)
        self._cycles = 0 if isinstance(ins, HostCall) else self.schedule.launch_cycles
        self._staging = {}
        self._execute(ins)
        op = type(ins).__name__
        c.cycles += self._cycles
        c.cycles_by_opcode[op] = c.cycles_by_opcode.get(op, 0) + self._cycles
        live = dict.fromkeys(MEMORY_NAMES, 0)
        for mem in ON_CHIP:
            live[mem] = sum(self.live[mem].values()) + self._staging.get(mem, 0)
        live["pmem"] = sum(e - a for a, e in self.pmem_end.items())
        live["tmem"] = len(self.tmem) * 256 * TABLE_ENTRY_BYTES
        for mem, used in live.items():
            c.peak_bytes[mem] = max(c.peak_bytes[mem], used)
        for mem, name in self.drops[idx] if idx < len(self.drops) else ():
            self.live[mem].pop(name, None)
        cost = InstructionCost(
            idx,
            op,
            getattr(ins, "name", None) or getattr(ins, "tensor", None) or op,
            self._cycles,
            {m: v - before_r[m] for m, v in c.bytes_read.items()},
            {m: v - before_w[m] for m, v in c.bytes_written.items()},
            live,
        )
        c.per_instruction.append(cost)
        return cost

    def _execute(self, ins: Any) -> None:
        c = self.c
        sch = self.schedule
        c.instructions += 1
        c.by_opcode[type(ins).__name__] = c.by_opcode.get(type(ins).__name__, 0) + 1
        if isinstance(ins, DmaIn):
            arr = self.get("dram", ins.tensor, "DmaIn")
            self.dram_read(ins.tensor, arr.nbytes)
            c.write(ins.dst, arr.nbytes)
            self.mem[ins.dst][ins.tensor] = arr
            self.live[ins.dst][ins.tensor] = arr.nbytes
            self._cycles += _transfer(sch, "dram", ins.dst, arr.nbytes)
        elif isinstance(ins, DmaOut):
            arr = self.get("sram", ins.tensor, "DmaOut")
            c.read("sram", arr.nbytes)
            c.write("dram", arr.nbytes)
            self.mem["dram"][ins.tensor] = arr
            self._cycles += _transfer(sch, "sram", "dram", arr.nbytes)
        elif isinstance(ins, TableLoad):
            t = self.get("dram", ins.table, "TableLoad")
            c.read("dram", ins.nbytes)
            c.write("tmem", ins.nbytes)
            c.table_loads += 1
            self.tmem[ins.slot] = tuple(int(v) for v in t)
            self._cycles += sch.table_load_cycles + _transfer(sch, "dram", "tmem", ins.nbytes)
        elif isinstance(ins, ParamLoad):
            c.read("dram", ins.nbytes)
            c.write("pmem", ins.nbytes)
            c.param_loads += 1
            end = ins.addr + ins.nbytes
            for a, e in list(self.pmem_end.items()):  # the load overwrites what it overlaps
                if a < end and ins.addr < e:
                    del self.pmem_end[a]
                    self.pmem.pop(a, None)
            self.pmem[ins.addr] = ins.post
            self.pmem_end[ins.addr] = end
            self._cycles += sch.param_load_cycles + _transfer(sch, "dram", "pmem", ins.nbytes)
        elif isinstance(ins, MatMul):
            if ins.tile is None:
                self._matmul(ins)
            else:
                self._tiled(ins)
        elif isinstance(ins, Activation):
            x = self.get("sram", ins.x, ins.name)
            c.read("sram", x.nbytes)
            table = self.table(ins.table_slot, ins.name)
            c.read("tmem", x.size * TABLE_ENTRY_BYTES)
            val = evaluate(ins.term(table), NUMPY, {"x": x.astype(np.int64)})
            self.put(ins.out, val, self.program.tensors[ins.out].dtype, ins.name)
            self._cycles += -(-x.size // sch.mac_n)
        elif isinstance(ins, Requant):
            x = self.get("sram", ins.x, ins.name)
            c.read("sram", x.nbytes)
            self._record(ins.param_addr, ins.name)
            self.put(ins.out, ins.compute(x), self.program.tensors[ins.out].dtype, ins.name)
            self._cycles += -(-x.size // sch.mac_n)
        elif isinstance(ins, Clip):
            x = self.get("sram", ins.x, ins.name)
            c.read("sram", x.nbytes)
            val = evaluate(ins.term(), NUMPY, {"x": x.astype(np.int64)})
            self.put(ins.out, val, ins.dtype, ins.name)
            self._cycles += -(-x.size // sch.mac_n)
        elif isinstance(ins, Eltwise):
            self._eltwise(ins)
        elif isinstance(ins, Concat):
            xs = [self.get("sram", x, ins.name) for x in ins.xs]
            for x in xs:
                c.read("sram", x.nbytes)
            val = ins.compute(xs)
            self.put(ins.out, val, ins.dtype, ins.name)
            self._cycles += -(-val.size // sch.mac_n)
        elif isinstance(ins, MaxPool):
            x = self.get("sram", ins.x, ins.name)
            c.read("sram", x.nbytes)
            try:
                val = ins.compute(x)
            except KernelError as e:
                raise SimulatorError(f"{ins.name}: {e}") from None
            self.put(ins.out, val, ins.dtype, ins.name)
            taps = int(np.prod(ins.window.kernel))
            self._cycles += -(-val.size * taps // sch.mac_n)
        elif isinstance(ins, Move):
            x = self.get("sram", ins.x, ins.name)
            c.read("sram", x.nbytes)
            try:
                val = ins.compute(x)
            except ValueError as e:
                raise SimulatorError(f"{ins.name}: {e}") from None
            self.put(ins.out, val, ins.dtype, ins.name)
            self._cycles += -(-val.size // sch.mac_n)
        elif isinstance(ins, HostCall):
            self._host(ins.step)
        else:
            raise SimulatorError(f"unknown instruction {type(ins).__name__}")

    def _eltwise(self, ins: Eltwise) -> None:
        """Both operands from sram, numpy-broadcast, through the unit's formula (the
        `npu_eltwise` primitive on the record it reads from pmem) and the optional table."""
        a = self.get("sram", ins.a, ins.name)
        b = self.get("sram", ins.b, ins.name)
        self.c.read("sram", a.nbytes + (b.nbytes if ins.b != ins.a else 0))
        if self.pmem.get(ins.param_addr) != ins.record:
            raise SimulatorError(f"{ins.name}: pmem {ins.param_addr} does not hold its record")
        self.c.read("pmem", 32)
        table = None
        if ins.table_slot is not None:
            table = self.table(ins.table_slot, ins.name)
        a64, b64 = np.broadcast_arrays(a.astype(np.int64), b.astype(np.int64))
        if table is not None:
            self.c.read("tmem", a64.size * TABLE_ENTRY_BYTES)
        val = evaluate(ins.term(table), NUMPY, {"a": a64.ravel(), "b": b64.ravel()})
        out = np.asarray(val).reshape(a64.shape)
        self.put(ins.out, out, self.program.tensors[ins.out].dtype, ins.name)
        self._cycles += -(-a64.size // self.schedule.mac_n)

    def _record(self, addr: int | None, who: str) -> Any:
        if addr not in self.pmem:
            raise SimulatorError(f"{who}: parameter record at pmem {addr} was never loaded")
        rec = self.pmem[addr]
        self.c.read("pmem", 16 * (len(rec) if per_column(rec) else 1))
        return rec

    def _table_state(self, ins: MatMul, acc_size: int) -> tuple[int, ...] | None:
        """The table a MatMul reads from table memory, its parameter record checked against
        the descriptor (the epilogue it applies is then the descriptor's with that table:
        `MatMul.loaded_post`)."""
        record = self._record(ins.param_addr, ins.name)
        if record != strip_tables(ins.enabled_post()):
            raise SimulatorError(f"{ins.name}: parameter record does not match the descriptor")
        table = None
        if ins.table_slot is not None:
            table = self.table(ins.table_slot, ins.name)
            self.c.read("tmem", acc_size * TABLE_ENTRY_BYTES)
        return table

    def _a_zp(self, ins: MatMul) -> int:
        """The MatMul's input zero point: the descriptor's, or read from dram at run time."""
        if ins.a_zp_input is None:
            return int(ins.a_zp)
        z = self.get("dram", ins.a_zp_input, ins.name)
        self.dram_read(ins.a_zp_input, z.nbytes)
        at = int_type(ins.a_type)
        if z.size != 1 or np.dtype(z.dtype) != at.numpy_dtype():
            raise SimulatorError(
                f"{ins.name}: zero point {ins.a_zp_input!r} is {z.dtype}{list(z.shape)}, "
                f"the MatMul expects one {at.name}"
            )
        return int(z.reshape(-1)[0])

    def _matmul(self, ins: MatMul) -> None:
        c = self.c
        a = self.get("sram", ins.a, ins.name)
        w = self.get("wmem", ins.w, ins.name)
        bias = self.get("wmem", ins.bias, ins.name)
        c.read("sram", a.nbytes)
        c.read("wmem", w.nbytes + (0 if bias is None else bias.nbytes))
        acc = ins.accumulate(a, w, bias, self._a_zp(ins))
        table = self._table_state(ins, acc.size) if ins.post_enable else None
        out = ins.epilogue(acc, table)
        self.put(ins.out, out, self.program.tensors[ins.out].dtype, ins.name)
        rows = acc.size // max(1, w.shape[-1])  # output rows (a conv's: output positions)
        sch = self.schedule
        self._cycles += _mac_cycles(sch, rows, w.shape[-1], w.shape[-2])
        if ins.post_enable:
            self._cycles += -(-acc.size // sch.mac_n)
        c.matmul_tiles += 1

    def _tiled(self, ins: MatMul) -> None:
        """A streamed MatMul over columns `ins.cols`, tile by tile (see `isa.MatMul`)."""
        c, sch = self.c, self.schedule
        if ins.cols is None or ins.tile is None:
            raise SimulatorError(f"{ins.name}: a tiled MatMul needs its column range and tile")
        if ins.window is not None:
            self._tiled_conv(ins)
            return
        a = self.get("dram", ins.a, ins.name)
        w = self.get("dram", ins.w, ins.name)
        bias = self.get("dram", ins.bias, ins.name)
        k, n = w.shape
        n0, n1 = ins.cols
        tm, tn, tk = ins.tile
        if not (0 <= n0 < n1 <= n and n1 - n0 <= tn and min(tm, tk) > 0):
            raise SimulatorError(f"{ins.name}: column range {ins.cols} / tile {ins.tile} invalid")
        rows_a = a.reshape(-1, k)
        rows = rows_a.shape[0]
        width = n1 - n0
        w_cols = w[:, n0:n1]
        b_cols = None if bias is None else np.asarray(bias)[n0:n1]
        post = None
        if ins.post_enable:
            post = ins.loaded_post(self._table_state(ins, rows * width))
        dtype = self.program.tensors[ins.out].dtype
        out_b = np.dtype(dtype).itemsize
        out, done = self.partial.get(ins.out) or (
            np.zeros((rows, n), dtype=np.int64),
            np.zeros(n, dtype=bool),
        )
        if done[n0:n1].any():
            raise SimulatorError(f"{ins.name}: columns {ins.cols} of {ins.out!r} computed twice")
        a_b, w_b = rows_a.itemsize, w.itemsize
        wz = ins.w_zp if isinstance(ins.w_zp, int) else np.asarray(ins.w_zp)
        a_zp = self._a_zp(ins)
        b64 = None if b_cols is None else b_cols.astype(np.int64)
        for m0 in range(0, rows, tm):
            m1 = min(rows, m0 + tm)
            acc = np.zeros((m1 - m0, width), dtype=np.int64)
            for k0 in range(0, k, tk):
                k1 = min(k, k0 + tk)
                dma = (m1 - m0) * (k1 - k0) * a_b
                self.dram_read(ins.a, dma)
                c.write("sram", dma)
                c.read("sram", dma)
                w_bytes = (k1 - k0) * width * w_b
                if m0 == 0 or not ins.w_stationary:
                    self.dram_read(ins.w, w_bytes)
                    c.write("wmem", w_bytes)
                    dma += w_bytes
                    if k0 == 0 and b_cols is not None and ins.bias is not None:
                        self.dram_read(ins.bias, b_cols.nbytes)
                        c.write("wmem", b_cols.nbytes)
                        dma += b_cols.nbytes
                c.read("wmem", w_bytes + (b_cols.nbytes if k0 == 0 and b_cols is not None else 0))
                acc += exact_matmul(rows_a[m0:m1, k0:k1], w_cols[k0:k1], a_zp, wz, None)
                if k0 == 0 and b64 is not None:
                    acc += b64
                # no check on a partial sum: int32 wrap-around addition is associative, so
                # only the full sum decides (as untiled: the epilogue's int32 precondition,
                # or the int32 store of a raw accumulator)
                compute = _mac_cycles(sch, m1 - m0, width, k1 - k0)
                if k1 == k:
                    y = acc if post is None else apply_columns(post, acc)
                    stored = self._store(y, dtype, ins.name)
                    out[m0:m1, n0:n1] = stored
                    c.write("sram", stored.nbytes)
                    c.read("sram", stored.nbytes)
                    c.write("dram", stored.nbytes)
                    dma += stored.nbytes
                    if post is not None:
                        compute += -(-acc.size // sch.mac_n)
                dma_cycles = _transfer(sch, "dram", "sram", dma)
                self._cycles += (
                    max(compute, dma_cycles) if sch.dma_overlap else compute + dma_cycles
                )
                c.matmul_tiles += 1
        self._staging = {
            # input tile, int32 accumulator and output tile (`schedule.staging`, unaligned)
            "sram": min(tm, rows) * (min(tk, k) * a_b + width * (ACC_BYTES + out_b)),
            "wmem": (k if ins.w_stationary else min(tk, k)) * width * w_b
            + (0 if b_cols is None else b_cols.nbytes),
        }
        done[n0:n1] = True
        if done.all():
            self.partial.pop(ins.out, None)
            final = out.reshape(a.shape[:-1] + (n,))
            self.mem["dram"][ins.out] = self._store(final, dtype, ins.name)
        else:
            self.partial[ins.out] = (out, done)

    def _tiled_conv(self, ins: MatMul) -> None:
        """A streamed conv over a window for columns `ins.cols`: per batch element, tiles of
        `tm` output rows, each reading its input rows with their halo (rows outside the input
        are the zero point, `prover.conv.row_tile`) into sram; the [K, n1 - n0] weight block
        stays in wmem; each finished output tile is postprocessed and goes to dram."""
        c, sch = self.c, self.schedule
        assert ins.cols is not None and ins.tile is not None and ins.window is not None
        win = ins.window
        a = self.get("dram", ins.a, ins.name)
        w = self.get("dram", ins.w, ins.name)
        bias = self.get("dram", ins.bias, ins.name)
        a_zp = self._a_zp(ins)  # padding reads it too
        k, n = w.shape
        n0, n1 = ins.cols
        tm, tn, _ = ins.tile
        if not (0 <= n0 < n1 <= n and n1 - n0 <= tn and tm > 0):
            raise SimulatorError(f"{ins.name}: column range {ins.cols} / tile {ins.tile} invalid")
        try:
            out_sp = win.out_spatial(tuple(a.shape[1:-1]))
        except KernelError as e:
            raise SimulatorError(f"{ins.name}: {e}") from None
        width = n1 - n0
        b_cols = None if bias is None else np.asarray(bias)[n0:n1].astype(np.int64)
        post = None
        positions = a.shape[0] * int(np.prod(out_sp))
        if ins.post_enable:
            post = ins.loaded_post(self._table_state(ins, positions * width))
        dtype = self.program.tensors[ins.out].dtype
        out_shape = (a.shape[0], *out_sp, n)
        out, done = self.partial.get(ins.out) or (
            np.zeros(out_shape, dtype=np.int64),
            np.zeros(n, dtype=bool),
        )
        if done[n0:n1].any():
            raise SimulatorError(f"{ins.name}: columns {ins.cols} of {ins.out!r} computed twice")
        w_bytes = k * width * w.itemsize
        self.dram_read(ins.w, w_bytes)  # stationary: once per column group
        c.write("wmem", w_bytes)
        dma = w_bytes
        if b_cols is not None and ins.bias is not None:
            self.dram_read(ins.bias, width * 4)
            c.write("wmem", width * 4)
            dma += width * 4
        wz = ins.w_zp if isinstance(ins.w_zp, int) else np.asarray(ins.w_zp)
        slab_bytes = 0
        for b in range(a.shape[0]):
            for r0 in range(0, out_sp[0], tm):
                r1 = min(out_sp[0], r0 + tm)
                slab, sub = row_tile(win, a[b : b + 1], r0, r1, a_zp)
                nb = slab.size * a.itemsize
                slab_bytes = max(slab_bytes, nb)
                self.dram_read(ins.a, nb)
                c.write("sram", nb)
                c.read("sram", nb)
                c.read("wmem", w_bytes)
                acc = conv_acc(slab, w, sub, a_zp, wz, b_cols, (n0, n1), matmul=exact_matmul)
                rows = acc.reshape(-1, width)
                y = rows if post is None else apply_columns(post, rows)
                stored = self._store(y, dtype, ins.name).reshape(acc.shape)
                out[b : b + 1, r0:r1, ..., n0:n1] = stored
                c.write("sram", stored.nbytes)
                c.read("sram", stored.nbytes)
                c.write("dram", stored.nbytes)
                dma += nb + stored.nbytes
                compute = _mac_cycles(sch, rows.shape[0], width, k)
                if post is not None:
                    compute += -(-rows.size // sch.mac_n)
                dma_cycles = _transfer(sch, "dram", "sram", dma)
                self._cycles += (
                    max(compute, dma_cycles) if sch.dma_overlap else compute + dma_cycles
                )
                dma = 0
                c.matmul_tiles += 1
        out_b = np.dtype(dtype).itemsize
        row_out = int(np.prod(out_sp[1:]))
        self._staging = {
            "sram": slab_bytes + min(tm, out_sp[0]) * row_out * width * (ACC_BYTES + out_b),
            "wmem": w_bytes + (0 if b_cols is None else width * 4),
        }
        done[n0:n1] = True
        if done.all():
            self.partial.pop(ins.out, None)
            self.mem["dram"][ins.out] = self._store(out, dtype, ins.name)
        else:
            self.partial[ins.out] = (out, done)

    def _store(self, values: Any, dtype: str, who: str) -> np.ndarray:
        try:
            return store(values, dtype, who)
        except HostInputError as e:
            raise SimulatorInputError(str(e)) from None
        except HostError as e:
            raise SimulatorError(str(e)) from None

    def _host(self, step: HostKernel | HostOnnx) -> None:
        self.c.host_calls += 1
        env = self.mem["dram"]
        for name in step.inputs:
            if name not in env:
                raise SimulatorError(f"{step.name}: host input {name!r} is not in dram")
            self.dram_read(name, env[name].nbytes)
        try:
            if self.host_results is not None and isinstance(step, HostOnnx):
                results = self._given(step)
            elif self.rows is not None and isinstance(step, HostOnnx):
                results = self._host_batch(step, env, self.rows)
            else:
                results = run_host(step, env)
        except HostInputError as e:
            raise SimulatorInputError(str(e)) from None
        except HostError as e:
            raise SimulatorError(str(e)) from None
        for name, arr in results.items():
            spec = self.program.tensors.get(name)
            if spec is not None and self.rows is not None:
                arr = self._batch_leading(name, arr, tuple(spec.shape))
            if spec is not None and (
                dtype_name(arr) != spec.dtype
                or arr.shape not in (tuple(spec.shape), _batched(spec.shape, self.rows))
            ):
                raise SimulatorError(
                    f"{step.name}: host output {name!r} is {arr.dtype.name}{list(arr.shape)}, "
                    f"the program declared {spec.dtype}{list(spec.shape)}"
                )
            self.c.write("dram", arr.nbytes)
            env[name] = arr

    def _given(self, step: HostOnnx) -> dict[str, np.ndarray]:
        assert self.host_results is not None
        missing = [n for n in step.outputs if n not in self.host_results]
        if missing:
            raise SimulatorError(f"{step.name}: no given result for {missing}")
        return {n: np.asarray(self.host_results[n]) for n in step.outputs}

    def _host_batch(
        self, step: HostOnnx, env: dict[str, np.ndarray], rows: int
    ) -> dict[str, np.ndarray]:
        """A host ONNX step of a batched run, on all rows in one ONNX Runtime call, as ORT
        runs the whole model on the batch (its float kernels may round a one-row product
        differently): its one-row model with the row inputs' shapes opened up. A layout
        step (one-row Reshape constants) runs row by row (`npu_backend.host_batch`)."""
        wide = frozenset(n for n in step.inputs if self._is_row_tensor(n, env[n], rows))
        if not wide:
            return run_host(step, env)
        if moves_data_only(bytes(step.model)):
            return self._host_rows(step, env, wide, rows)
        feeds = {n: env[n].reshape(self.layout.get(n, env[n].shape)) for n in step.inputs}
        return run_host(replace(step, model=widened(bytes(step.model), wide)), feeds)

    def _host_rows(
        self, step: HostOnnx, env: dict[str, np.ndarray], wide: frozenset[str], rows: int
    ) -> dict[str, np.ndarray]:
        """A data-movement host step once per row (row inputs `wide`), outputs stacked."""
        parts = [
            run_host(step, {n: (env[n][r : r + 1] if n in wide else env[n]) for n in step.inputs})
            for r in range(rows)
        ]
        try:
            return {n: np.concatenate([p[n] for p in parts], axis=0) for n in step.outputs}
        except ValueError as e:  # 0-d outputs: not a row-wise step
            raise SimulatorError(f"{step.name}: cannot run row by row: {e}") from None

    def _batch_leading(self, name: str, arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """A host output of a batched run with the batch on axis 0 (see `layout`): ORT may
        return it on a later axis after unit ones (ArrayFeatureExtractor: [1, B])."""
        lead = _batched(shape, self.rows)
        if arr.shape in (shape, lead) or arr.ndim != len(shape):
            return arr
        diff = [k for k in range(len(shape)) if arr.shape[k] != shape[k]]
        if (
            len(diff) == 1
            and arr.shape[diff[0]] == self.rows
            and not any(d != 1 for d in shape[: diff[0] + 1])
        ):
            self.layout[name] = tuple(arr.shape)
            return arr.reshape(lead)
        return arr

    def _is_row_tensor(self, name: str, arr: np.ndarray, rows: int) -> bool:
        if name in self.program.constants or not arr.ndim or arr.shape[0] != rows:
            return False
        spec = self.program.tensors.get(name)
        if spec is None:
            return name in self.program.dynamic_batch
        return bool(spec.shape) and spec.shape[0] == 1


StepHook = Callable[[InstructionCost, Counters], None]
"""Called after each executed instruction with its cost and the run's counters so far."""


@dataclass
class Trace:
    """A whole run: graph outputs, counters, and every tensor memory at the end."""

    outputs: dict[str, np.ndarray]
    counters: Counters
    memory: dict[str, dict[str, np.ndarray]]  # "dram" / "sram" / "wmem" -> name -> value


def execute(
    program: Program,
    inputs: dict[str, np.ndarray],
    rows: int | None = None,
    target: Target | None = None,
    on_step: StepHook | None = None,
    host_results: Mapping[str, np.ndarray] | None = None,
) -> Trace:
    """Execute `program` on `inputs` (see `run`); `on_step(cost, counters)` is called after
    every instruction, in program order (`cost.live_bytes` is that instruction's own peak;
    the counters are the run's totals so far: read them, do not change them).
    `host_results` (by tensor name) stand in for the outputs of host ONNX steps, which are
    then not run (`npu_backend.runner` replays rows of a batched run with them)."""
    schedule = target.schedule if target is not None else _shipped_schedule(program.target)
    m = Machine(program, _check_inputs(program, inputs, rows), rows, schedule, host_results)
    for ins in program.instructions:
        try:
            cost = m.step(ins)
        except PreconditionViolation as e:
            who = getattr(ins, "name", None) or type(ins).__name__
            raise UndefinedResult(f"{who}: {e}") from None
        if on_step is not None:
            on_step(cost, m.c)
    if m.partial:
        raise SimulatorError(f"tiled output(s) {sorted(m.partial)} were left incomplete")
    outs = {}
    for name in program.outputs:
        if name not in m.mem["dram"]:
            raise SimulatorError(f"graph output {name!r} was never written back to dram")
        outs[name] = m.mem["dram"][name]
    return Trace(outs, m.c, {k: dict(v) for k, v in m.mem.items()})


def run(
    program: Program,
    inputs: dict[str, np.ndarray],
    rows: int | None = None,
    target: Target | None = None,
    host_results: Mapping[str, np.ndarray] | None = None,
) -> tuple[dict[str, np.ndarray], Counters]:
    """Execute `program` on `inputs`; returns (outputs by name, counters).

    With `rows`, the dynamic-batch inputs hold `rows` rows where the program was compiled
    for one, and every step runs on all rows at once, host ONNX steps in one ONNX Runtime
    call each as ORT runs the model on the batch (`npu_backend.runner.run_batched` checks
    the rest against one-row replays; counters are then those of the wide run).
    Cycles use `target`'s schedule; without it, that of the shipped target the program
    names (the defaults of `Schedule` if there is none). `execute` adds a per-instruction
    hook and the final memories.
    """
    t = execute(program, inputs, rows, target, host_results=host_results)
    return t.outputs, t.counters
