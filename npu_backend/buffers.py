"""What an NPU step needs in memory, known before code is generated: each tensor's static
spec (`infer_specs`), its bytes, and whether a step's buffers fit the target's memories
(`memory_issues`). The compiler's lowering and tiling checks ask these without generating a
program; `npu_backend.codegen` uses the same answers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from prover.domain import KernelError
from prover.inttypes import INT32, IntType, int_type
from prover.matmul import accumulator_range, check_fits_int32

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
)
from .postprocess import per_column, posts_but_scale
from .schedule import aligned, smallest_tile_fits, tiling_allowed
from .target import Target
from .validate import ValidationIssue


class CodegenError(ValueError):
    """The lowered model cannot be turned into a program (shapes, memory exhausted, ...)."""


@lru_cache(maxsize=64)
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
            if per_column(st.post) and len(st.post) != n:
                raise CodegenError(f"{st.name}: {len(st.post)} column epilogues for {n} columns")
            if isinstance(st.w_zp, tuple) and len(st.w_zp) != n:
                raise CodegenError(f"{st.name}: {len(st.w_zp)} weight zero points for {n} columns")
            if st.bias is not None and need(st.bias, st).shape != (n,):
                raise CodegenError(f"{st.name}: bias must have shape ({n},)")
            _check_operands(st, a, model.constants, w)
            out_t = posts_but_scale(st.post)[0].output_type if st.post is not None else "int32"
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
    why = _range_issue(w, wzp, at, zps, bias)
    if why is not None:
        raise CodegenError(
            f"{st.name} {why}; the NPU accumulates in int32 (split K or keep it on the host)"
        )


# _range_issue's answers by the weights and bias themselves (kept in the entry, so their
# ids are not reused) and the scalars: lowering, each program generated and the ledger's
# ask about every MatMul's operands again
_RANGES: dict[tuple[Any, ...], tuple[Any, Any, str | None]] = {}


def _range_issue(
    w: np.ndarray, wzp: np.ndarray, at: IntType, zps: tuple[int, ...], bias: Any
) -> str | None:
    """Why the accumulator of `w` (zero points `wzp`, inputs of `at` with each of the zero
    points `zps`, `bias`) may leave int32; None where it fits."""
    key = (id(w), id(bias), wzp.tobytes(), wzp.shape, at.name, zps)
    hit = _RANGES.get(key)
    if hit is not None and hit[0] is w and hit[1] is bias:
        return hit[2]
    why = None
    try:
        for zp in zps:
            check_fits_int32(accumulator_range(w, wzp, at, zp, bias), "accumulator")
    except KernelError as e:
        why = str(e)
    if len(_RANGES) >= 1024:
        _RANGES.clear()
    _RANGES[key] = (w, bias, why)
    return why


# --- emission ---------------------------------------------------------------------------
