"""A bit-exact simulator of NPU programs with traffic counters.

Values follow the kernel's concrete semantics (each instruction's semantics in
`npu_backend.isa`), evaluated strictly: an input where a primitive's precondition
fails (the hardware result is undefined) raises `UndefinedResult`. The simulator keeps each memory's contents separately, so a
program that reads a tensor before its DMA, or uses a table slot or parameter
record that was never loaded, fails with `SimulatorError` instead of computing.

Counted per memory (dram, sram, wmem, pmem, tmem): bytes read and written;
plus table loads, parameter loads, instructions (total and per opcode) and host calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

from prover.domain import NUMPY
from prover.errors import BadInput
from prover.terms import PreconditionViolation, evaluate

from .host import HostError, run_host, store
from .isa import (
    MEMORY_NAMES,
    Activation,
    Clip,
    DmaIn,
    DmaOut,
    HostCall,
    MatMul,
    ParamLoad,
    Requant,
    TableLoad,
    strip_tables,
)
from .lowered import HostKernel, HostOnnx
from .program import Program

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
class Counters:
    """Traffic and instruction counts of one run."""

    bytes_read: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MEMORY_NAMES, 0))
    bytes_written: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MEMORY_NAMES, 0))
    table_loads: int = 0
    param_loads: int = 0
    instructions: int = 0
    host_calls: int = 0
    by_opcode: dict[str, int] = field(default_factory=dict)

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
        dt = np.dtype(spec.dtype)
        if dt.kind in "iu":
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


class Machine:
    """Memory state of one run."""

    def __init__(
        self, program: Program, inputs: dict[str, np.ndarray], rows: int | None = None
    ) -> None:
        self.program = program
        self.rows = rows  # a batched run: row tensors hold `rows` rows instead of one
        self.mem: dict[str, dict[str, np.ndarray]] = {"dram": {}, "sram": {}, "wmem": {}}
        self.mem["dram"].update({k: np.asarray(v) for k, v in program.constants.items()})
        self.mem["dram"].update(inputs)
        self.tmem: dict[int, tuple[int, ...]] = {}
        self.pmem: dict[int, Any] = {}
        self.c = Counters()

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

    def put(self, name: str, values: Any, dtype: str, who: str) -> np.ndarray:
        try:
            arr = store(values, dtype, who)
        except HostError as e:
            raise SimulatorError(str(e)) from None
        self.mem["sram"][name] = arr
        self.c.write("sram", arr.nbytes)
        return arr

    def table(self, slot: int | None, who: str) -> tuple[int, ...]:
        if slot not in self.tmem:
            raise SimulatorError(f"{who}: table slot {slot} was never loaded")
        return self.tmem[slot]

    def step(self, ins: Any) -> None:
        c = self.c
        c.instructions += 1
        c.by_opcode[type(ins).__name__] = c.by_opcode.get(type(ins).__name__, 0) + 1
        if isinstance(ins, DmaIn):
            arr = self.get("dram", ins.tensor, "DmaIn")
            c.read("dram", arr.nbytes)
            c.write(ins.dst, arr.nbytes)
            self.mem[ins.dst][ins.tensor] = arr
        elif isinstance(ins, DmaOut):
            arr = self.get("sram", ins.tensor, "DmaOut")
            c.read("sram", arr.nbytes)
            c.write("dram", arr.nbytes)
            self.mem["dram"][ins.tensor] = arr
        elif isinstance(ins, TableLoad):
            t = self.get("dram", ins.table, "TableLoad")
            c.read("dram", ins.nbytes)
            c.write("tmem", ins.nbytes)
            c.table_loads += 1
            self.tmem[ins.slot] = tuple(int(v) for v in t)
        elif isinstance(ins, ParamLoad):
            c.read("dram", ins.nbytes)
            c.write("pmem", ins.nbytes)
            c.param_loads += 1
            self.pmem[ins.addr] = ins.post
        elif isinstance(ins, MatMul):
            self._matmul(ins)
        elif isinstance(ins, Activation):
            x = self.get("sram", ins.x, ins.name)
            c.read("sram", x.nbytes)
            table = self.table(ins.table_slot, ins.name)
            c.read("tmem", x.size * TABLE_ENTRY_BYTES)
            val = evaluate(ins.term(table), NUMPY, {"x": x.astype(np.int64)})
            self.put(ins.out, val, self.program.tensors[ins.out].dtype, ins.name)
        elif isinstance(ins, Requant):
            x = self.get("sram", ins.x, ins.name)
            c.read("sram", x.nbytes)
            self._record(ins.param_addr, ins.name)
            self.put(ins.out, ins.compute(x), self.program.tensors[ins.out].dtype, ins.name)
        elif isinstance(ins, Clip):
            x = self.get("sram", ins.x, ins.name)
            c.read("sram", x.nbytes)
            val = evaluate(ins.term(), NUMPY, {"x": x.astype(np.int64)})
            self.put(ins.out, val, ins.dtype, ins.name)
        elif isinstance(ins, HostCall):
            self._host(ins.step)
        else:
            raise SimulatorError(f"unknown instruction {type(ins).__name__}")

    def _record(self, addr: int | None, who: str) -> Any:
        if addr not in self.pmem:
            raise SimulatorError(f"{who}: parameter record at pmem {addr} was never loaded")
        rec = self.pmem[addr]
        self.c.read("pmem", 16 * (len(rec) if isinstance(rec, tuple) else 1))
        return rec

    def _matmul(self, ins: MatMul) -> None:
        c = self.c
        a = self.get("sram", ins.a, ins.name)
        w = self.get("wmem", ins.w, ins.name)
        bias = self.get("wmem", ins.bias, ins.name)
        c.read("sram", a.nbytes)
        c.read("wmem", w.nbytes + (0 if bias is None else bias.nbytes))
        acc = ins.accumulate(a, w, bias)
        table = None
        if ins.post_enable:
            post = ins.enabled_post()
            if self._record(ins.param_addr, ins.name) != strip_tables(post):
                raise SimulatorError(f"{ins.name}: parameter record does not match the descriptor")
            if ins.table_slot is not None:
                table = self.table(ins.table_slot, ins.name)
                c.read("tmem", acc.size * TABLE_ENTRY_BYTES)
        out = ins.epilogue(acc, table)
        self.put(ins.out, out, self.program.tensors[ins.out].dtype, ins.name)

    def _host(self, step: HostKernel | HostOnnx) -> None:
        self.c.host_calls += 1
        env = self.mem["dram"]
        for name in step.inputs:
            if name not in env:
                raise SimulatorError(f"{step.name}: host input {name!r} is not in dram")
            self.c.read("dram", env[name].nbytes)
        try:
            if self.rows is not None and isinstance(step, HostOnnx):
                results = self._host_rows(step, env, self.rows)
            else:
                results = run_host(step, env)
        except HostError as e:
            raise SimulatorError(str(e)) from None
        for name, arr in results.items():
            spec = self.program.tensors.get(name)
            if spec is not None and (
                arr.dtype.name != spec.dtype
                or arr.shape not in (tuple(spec.shape), _batched(spec.shape, self.rows))
            ):
                raise SimulatorError(
                    f"{step.name}: host output {name!r} is {arr.dtype.name}{list(arr.shape)}, "
                    f"the program declared {spec.dtype}{list(spec.shape)}"
                )
            self.c.write("dram", arr.nbytes)
            env[name] = arr

    def _host_rows(
        self, step: HostOnnx, env: dict[str, np.ndarray], rows: int
    ) -> dict[str, np.ndarray]:
        """A host ONNX step of a batched run, once per row: its model is compiled for one
        row, and ONNX Runtime's float kernels may differ with the row count."""
        wide = {n for n in step.inputs if self._is_row_tensor(n, env[n], rows)}
        parts = [
            run_host(step, {n: (env[n][r : r + 1] if n in wide else env[n]) for n in step.inputs})
            for r in range(rows)
        ]
        try:
            return {n: np.concatenate([p[n] for p in parts], axis=0) for n in step.outputs}
        except ValueError as e:  # 0-d outputs: not a row-wise step
            raise SimulatorError(f"{step.name}: cannot run row by row: {e}") from None

    def _is_row_tensor(self, name: str, arr: np.ndarray, rows: int) -> bool:
        if name in self.program.constants or not arr.ndim or arr.shape[0] != rows:
            return False
        spec = self.program.tensors.get(name)
        if spec is None:
            return name in self.program.dynamic_batch
        return bool(spec.shape) and spec.shape[0] == 1


def run(
    program: Program, inputs: dict[str, np.ndarray], rows: int | None = None
) -> tuple[dict[str, np.ndarray], Counters]:
    """Execute `program` on `inputs`; returns (outputs by name, counters).

    With `rows`, the dynamic-batch inputs hold `rows` rows where the program was compiled
    for one, and every step runs on all rows at once (`npu_backend.runner.run_batched`
    checks the result against a one-row run; counters are then those of the wide run).
    """
    m = Machine(program, _check_inputs(program, inputs, rows), rows)
    for ins in program.instructions:
        try:
            m.step(ins)
        except PreconditionViolation as e:
            who = getattr(ins, "name", None) or type(ins).__name__
            raise UndefinedResult(f"{who}: {e}") from None
    outs = {}
    for name in program.outputs:
        if name not in m.mem["dram"]:
            raise SimulatorError(f"graph output {name!r} was never written back to dram")
        outs[name] = m.mem["dram"][name]
    return outs, m.c
