"""The table-slot and parameter-register lifetime invariant of a program.

Several fused ops share the table memory's slots and the parameter memory (pmem), so
codegen reuses what is resident and evicts what is needed furthest in the future. The
invariant `check_lifetimes` enforces, walking the instructions in order:

- every instruction that reads a table slot finds there exactly the table it needs, and
  every one that reads a parameter record finds exactly its record at its pmem address
  (a ParamLoad overwrites every record whose byte range it overlaps; a TableLoad the
  slot's previous table): a load never destroys a value a later instruction still reads
  without reloading it first;
- a table or record is never loaded again while an identical copy is still resident
  (identical values are loaded once and reused while live).
"""

from __future__ import annotations

from dataclasses import dataclass

from .isa import (
    Activation,
    Eltwise,
    MatMul,
    ParamLoad,
    Requant,
    TableLoad,
    strip_tables,
    table_of,
)
from .postprocess import PostProcess
from .program import Program


class LifetimeError(ValueError):
    """A program breaks the slot/register lifetime invariant (a codegen bug)."""


@dataclass
class _Record:
    end: int
    value: object


def check_lifetimes(program: Program, slots: int) -> None:
    """Raise `LifetimeError` at the first violation of the module's invariant.

    `slots` is the number of table slots of the target.
    """
    tables: dict[int, tuple[str, int]] = {}  # slot -> (table constant, index of its load)
    records: dict[int, _Record] = {}  # pmem address -> resident record
    killed: dict[int, int] = {}  # pmem address -> index of the load that overwrote it
    evicted: dict[int, int] = {}  # slot -> index of the load that replaced its table
    consts = program.constants
    contents: dict[str, tuple[int, ...]] = {}  # each table constant converted once

    def content(name: str) -> tuple[int, ...]:
        if name not in contents:
            contents[name] = tuple(int(v) for v in consts[name])
        return contents[name]

    def need_table(k: int, who: str, slot: int | None, table: tuple[int, ...]) -> None:
        if slot is None or slot not in tables:
            raise LifetimeError(f"#{k} {who}: table slot {slot} holds no table")
        name, at = tables[slot]
        if content(name) != tuple(table):
            by = f" (overwritten by the TableLoad #{at})" if slot in evicted else ""
            raise LifetimeError(f"#{k} {who}: table slot {slot} holds another table{by}")

    def need_record(k: int, who: str, addr: int | None, value: object) -> None:
        rec = records.get(addr) if addr is not None else None
        if rec is None or rec.value != value:
            by = f" (overwritten by the ParamLoad #{killed[addr]})" if addr in killed else ""
            raise LifetimeError(f"#{k} {who}: pmem {addr} does not hold its record{by}")

    for k, ins in enumerate(program.instructions):
        if isinstance(ins, TableLoad):
            if not 0 <= ins.slot < slots:
                raise LifetimeError(f"#{k} TableLoad: slot {ins.slot} out of range ({slots})")
            for s, (name, _) in tables.items():
                if content(name) == content(ins.table):
                    raise LifetimeError(
                        f"#{k} TableLoad: table {ins.table} loaded again while resident in slot {s}"
                    )
            if ins.slot in tables:
                evicted[ins.slot] = k
            tables[ins.slot] = (ins.table, k)
        elif isinstance(ins, ParamLoad):
            for addr, rec in records.items():
                if rec.value == ins.post:
                    raise LifetimeError(
                        f"#{k} ParamLoad: record loaded again while resident at pmem {addr}"
                    )
            end = ins.addr + ins.nbytes
            for addr in [a for a, r in records.items() if a < end and ins.addr < r.end]:
                del records[addr]
                killed[addr] = k
            records[ins.addr] = _Record(end, ins.post)
            killed.pop(ins.addr, None)
        elif isinstance(ins, MatMul) and ins.post_enable and ins.post is not None:
            need_record(k, ins.name, ins.param_addr, strip_tables(ins.post))
            table = table_of(ins.post)
            if table is not None:
                need_table(k, ins.name, ins.table_slot, table)
        elif isinstance(ins, Requant):
            rqs = ins.requant if isinstance(ins.requant, tuple) else (ins.requant,)
            need_record(k, ins.name, ins.param_addr, tuple(PostProcess(rq) for rq in rqs))
        elif isinstance(ins, Activation):
            need_table(k, ins.name, ins.table_slot, content(ins.table))
        elif isinstance(ins, Eltwise):
            need_record(k, ins.name, ins.param_addr, ins.record)
            if ins.table is not None:
                need_table(k, ins.name, ins.table_slot, content(ins.table))


__all__ = ["LifetimeError", "check_lifetimes"]
