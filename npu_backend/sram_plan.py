"""Liveness-aware sram placement: an address per tensor, planned before emission.

Codegen frees a tensor's sram block after its last NPU use, but a first-fit allocator
that places each buffer as it comes can still leave the free bytes in pieces: a small
input at the bottom, a large output above it; once the input dies, the next output of the
same size finds two holes, each too small (QLinearMatMul -> Clip, issue 28 #11). This
module plans every sram tensor's address from the whole step list first: a tensor lives
from the step that first needs it in sram (its producer, or its first NPU reader when it
comes from dram) to its last NPU reader, and tensors are placed largest first at the
lowest address that overlaps no tensor live at the same time (the greedy "arena" plan).

The plan is a hint (`Allocator.alloc(..., at=...)`): codegen uses a planned address when
that range is free at the time, else places the buffer first-fit, spilling as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .lowered import NpuMatMul, Step, npu_reads, step_writes
from .schedule import ALIGN


def _in_sram(st: Step, tiled: bool) -> tuple[list[str], str | None]:
    """(inputs read from sram, output written to sram) of a step placed in sram."""
    if isinstance(st, NpuMatMul):
        return ([], None) if tiled else ([st.a], st.out)
    reads = npu_reads(st)  # every other NPU step reads its operands from sram
    return (list(reads), step_writes(st)[0]) if reads else ([], None)


def lifetimes(steps: Sequence[Step], tiled: frozenset[int]) -> dict[str, tuple[int, int]]:
    """Tensor -> (first, last) step index during which it occupies sram; `tiled`: the
    indices of MatMul steps streamed through staging buffers (operands stay in dram)."""
    out: dict[str, tuple[int, int]] = {}
    for i, st in enumerate(steps):
        ins, o = _in_sram(st, i in tiled)
        for name in [*ins, *([o] if o is not None else [])]:
            first, _ = out.get(name, (i, i))
            out[name] = (first, i)
    return out


def _aligned(n: int) -> int:
    return max(ALIGN, -(-n // ALIGN) * ALIGN)


def plan(
    steps: Sequence[Step], sizes: Mapping[str, int], size: int, tiled: frozenset[int]
) -> dict[str, int]:
    """A planned sram address per tensor (bytes from `sizes`); tensors that do not fit
    `size` alongside those live with them get no address (codegen places them itself)."""
    live = lifetimes(steps, tiled)
    order = sorted(live, key=lambda t: (-_aligned(sizes.get(t, 0)), live[t][0], t))
    placed: list[tuple[int, int, int, int]] = []  # (addr, end, first, last)
    out: dict[str, int] = {}
    for t in order:
        n, (first, last) = _aligned(sizes.get(t, 0)), live[t]
        busy = sorted((a, e) for a, e, f, lst in placed if f <= last and first <= lst)
        addr = 0
        for a, e in busy:
            if a - addr >= n:
                break
            addr = max(addr, e)
        if addr + n <= size:
            placed.append((addr, addr + n, first, last))
            out[t] = addr
    return out
