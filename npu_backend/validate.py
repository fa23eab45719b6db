"""Validation before emitting code: every incomplete or unsupported state is a specific error.

Two levels:
- `validate_step(step, target)`: per lowered step, BEFORE codegen. The compiler
  calls it on a fused site and falls back to the unfused form when it returns issues.
- `validate_program(program, target)`: on generated instructions (tables allocated
  before use and not overwritten, parameter records loaded, descriptors complete).

Each issue carries a DESIGN.md reason code and a message saying what to do.
"""

from __future__ import annotations

import operator
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from prover.domain import KernelError
from prover.inttypes import int_type
from prover.lut import FUNCTIONS, check_table
from prover.qlinear_binary import SpanMode, span_mode

from .lowered import (
    HostKernel,
    HostOnnx,
    NpuClip,
    NpuConcat,
    NpuEltwise,
    NpuLut,
    NpuMatMul,
    NpuMaxPool,
    NpuMove,
    NpuRequant,
    Step,
)
from .postprocess import (
    AddParams,
    ColumnPosts,
    LutParams,
    PostProcess,
    RequantParams,
    float32_requants_valid,
    per_column,
    posts_of,
)
from .target import ComputeCaps, Target

CODES = (
    "incomplete_parameters",
    "unsupported_intermediate_type",
    "unsupported_function",
    "grouped_codegen_unsupported",
    "intervening_requantize",
    "intervening_clip",
    "layout_mismatch",
    "unsupported_conv_window",
    "unsupported_eltwise",
    "unsupported_op",
)


@dataclass(frozen=True)
class ValidationIssue:
    """One reason a step or instruction cannot be emitted as is."""

    code: str
    step: str
    message: str

    def __str__(self) -> str:
        return f"{self.code}: {self.step}: {self.message}"


class ValidationError(ValueError):
    """Raised by codegen when a step or program fails validation; `.issues` lists why."""

    def __init__(self, issues: list[ValidationIssue]) -> None:
        self.issues = list(issues)
        self.code = issues[0].code
        more = f" (+{len(issues) - 1} more)" if len(issues) > 1 else ""
        super().__init__(str(issues[0]) + more)


def _requant_issues(rq: RequantParams, scheme: str, name: str) -> list[ValidationIssue]:
    out: list[ValidationIssue] = []
    if rq.scheme != scheme:
        out.append(
            ValidationIssue(
                "intervening_requantize",
                name,
                f"requantization scheme {rq.scheme!r} is not this target's {scheme!r}; "
                f"convert the scale with npu_backend.target.requant_from_scale(..., {scheme!r}) "
                "and prove that lowering, or keep the requantize on the host",
            )
        )
        return out
    needed = ("scale",) if rq.scheme == "float32" else ("multiplier", "shift")
    missing = [f for f in needed if getattr(rq, f) is None]
    if missing:
        out.append(
            ValidationIssue(
                "incomplete_parameters",
                name,
                f"requantization header lacks {', '.join(missing)}; fill in the parameters",
            )
        )
        return out
    try:
        rq.check()
    except (KernelError, TypeError, ValueError) as e:
        out.append(ValidationIssue("incomplete_parameters", name, f"bad requantization: {e}"))
    return out


def _lut_issues(
    lut: LutParams, function: str | None, target: Target, name: str
) -> list[ValidationIssue]:
    table, in_type, out_type = lut.table, lut.in_type, lut.out_type
    given = {
        "table": table,
        "in_type": in_type,
        "out_type": out_type,
        "index_order": lut.index_order,
        "function": function,
    }
    missing = [f for f, v in given.items() if v is None]
    if missing or table is None or in_type is None or out_type is None:
        return [
            ValidationIssue(
                "incomplete_parameters",
                name,
                f"LUT without its metadata ({', '.join(missing)} missing); attach the table's "
                "function, input/output types and index order, or drop the LUT",
            )
        ]
    out: list[ValidationIssue] = []
    if function not in FUNCTIONS:
        out.append(ValidationIssue("unsupported_function", name, f"unknown function {function!r}"))
    try:
        check_table(table, int_type(in_type), int_type(out_type))
    except KernelError as e:
        out.append(
            ValidationIssue("incomplete_parameters", name, f"{e}; rebuild the table for the LUT")
        )
    if len(table) != target.tables.entries:
        out.append(
            ValidationIssue(
                "incomplete_parameters",
                name,
                f"table has {len(table)} entries; table slots hold {target.tables.entries}",
            )
        )
    if lut.index_order != target.lut_builder.index_order:
        out.append(
            ValidationIssue(
                "layout_mismatch",
                name,
                f"table is in {lut.index_order!r} index order but the hardware indexes "
                f"{target.lut_builder.index_order!r}; reorder it with prover.lut.reorder_table",
            )
        )
    return out


def _add_issues(
    p: PostProcess, add: AddParams, caps: ComputeCaps, name: str, op_name: str, target: Target
) -> list[ValidationIssue]:
    """A post-requantization add stage: supported by the unit, complete, same type."""
    if "requantized" not in caps.bias:
        return [
            ValidationIssue(
                "unsupported_function",
                name,
                f"{op_name} postprocessing on target {target.name!r} has no post-requantization "
                f"add stage (bias: {sorted(caps.bias)}); keep the QLinearAdd separate or fold "
                "the bias into the accumulator",
            )
        ]
    try:
        add.check()
        if add.type != p.requant.out_type:
            raise KernelError(
                f"add stage type {add.type} differs from the intermediate type {p.requant.out_type}"
            )
        if add.fma != caps.add_fma:
            raise KernelError(f"add stage fma={add.fma} but the hardware's is {caps.add_fma}")
    except KernelError as e:
        return [ValidationIssue("incomplete_parameters", name, f"{e}")]
    return []


def _stage_key(p: PostProcess) -> tuple[Any, ...]:
    """What `_stage_issues` reads of `p`: all of it but the requantization's scale
    parameters (per-channel columns differ in those only)."""
    rq = p.requant
    return (rq.out_type, rq.zp, p.clip, p.function, p.lut, p.out_type, p.out_zp, p.add)


def _stage_issues(
    p: PostProcess,
    step: NpuMatMul,
    caps: ComputeCaps,
    target: Target,
    op_name: str,
    lut_memo: dict[tuple[int, str | None], tuple[LutParams, list[ValidationIssue]]] | None = None,
) -> list[ValidationIssue]:
    """Issues of `p`'s stages after its requantization's parameters: the intermediate type,
    clip, add, table and output encoding (`_stage_key`). `lut_memo`: the LUT issues already
    found for this step, by (id of the table's params, function): per-channel columns'
    postprocessing share one `LutParams`."""
    name = step.name
    out: list[ValidationIssue] = []
    if p.requant.out_type not in caps.intermediate_types:
        out.append(
            ValidationIssue(
                "unsupported_intermediate_type",
                name,
                f"intermediate type {p.requant.out_type!r} is not supported by {op_name} "
                f"postprocessing (supported: {sorted(caps.intermediate_types)}); "
                "keep the op unfused",
            )
        )
    if p.clip is not None:
        lo, hi = p.clip
        if not caps.clip:
            out.append(
                ValidationIssue(
                    "intervening_clip",
                    name,
                    f"{op_name} postprocessing has no clip stage; keep the Clip as a separate op",
                )
            )
        elif lo > hi:
            out.append(ValidationIssue("incomplete_parameters", name, f"clip lo {lo} > hi {hi}"))
    if p.add is not None:
        out += _add_issues(p, p.add, caps, name, op_name, target)
    if p.lut is None and p.function is not None:
        out.append(
            ValidationIssue(
                "incomplete_parameters",
                name,
                f"fusion attributes left on a node without a LUT (function {p.function!r}); "
                "attach the table or clear the function to emit an unfused MatMul",
            )
        )
    if p.lut is not None:
        key = (id(p.lut), p.function)
        hit = None if lut_memo is None else lut_memo.get(key)
        if hit is not None and hit[0] is p.lut:
            lut_issues = list(hit[1])
        else:
            lut_issues = _lut_issues(p.lut, p.function, target, name)
            if lut_memo is not None:
                lut_memo[key] = (p.lut, list(lut_issues))
        out += lut_issues
        if not lut_issues:
            if p.function not in caps.functions:
                out.append(
                    ValidationIssue(
                        "unsupported_function",
                        name,
                        f"{op_name} postprocessing on target {target.name!r} does not support "
                        f"{p.function!r} (supported: {sorted(caps.functions)}); keep the "
                        "activation standalone",
                    )
                )
            if p.lut.in_type != p.requant.out_type:
                out.append(
                    ValidationIssue(
                        "incomplete_parameters",
                        name,
                        f"LUT input type {p.lut.in_type!r} differs from the intermediate type "
                        f"{p.requant.out_type!r}; rebuild the table for the intermediate encoding",
                    )
                )
            size = len(p.lut.table or ())
            if size not in caps.lut_sizes:
                out.append(
                    ValidationIssue("incomplete_parameters", name, f"LUT size {size} unsupported")
                )
    try:
        ot = int_type(p.output_type)
        if p.output_zp is None:
            raise KernelError("output zero point unknown (LUT without out_zp or build spec)")
        if not ot.contains(p.output_zp):
            raise KernelError(f"output zero point {p.output_zp} outside {ot.name}")
        if p.lut is not None and p.lut.out_type is not None and p.lut.out_type != ot.name:
            raise KernelError(f"output type {ot.name} differs from the LUT's {p.lut.out_type}")
        stage_zp = p.requant.zp if p.add is None else p.add.c_zp
        if p.lut is None and (ot.name != p.requant.out_type or p.output_zp != stage_zp):
            raise KernelError("without a LUT the output encoding must be the requantization's")
    except KernelError as e:
        out.append(
            ValidationIssue(
                "incomplete_parameters", name, f"output encoding: {e}; fix the output encoding"
            )
        )
    return out


# validate_matmul's answers by (step, target) identity: a step is validated by lowering,
# by each program generated from it (the ledger generates two more) and by the program's
# own validation, and a per-channel step's columns cost ~10 us each. Weak references: the
# memo keeps no step (nor its weights) alive.
_VALIDATED: dict[tuple[int, int], tuple[Any, Any, list[ValidationIssue]]] = {}


def validate_matmul(step: NpuMatMul, target: Target) -> list[ValidationIssue]:
    """Issues of a MatMul step against its compute unit's capabilities (`step.compute`)."""
    key = (id(step), id(target))
    hit = _VALIDATED.get(key)
    if hit is not None and hit[0]() is step and hit[1]() is target:
        return list(hit[2])
    out = _validate_matmul(step, target)
    if len(_VALIDATED) >= 4096:
        _VALIDATED.clear()
    _VALIDATED[key] = (weakref.ref(step), weakref.ref(target), list(out))
    return out


# _posts_issues' answers by the epilogue's posts (the same objects, in order) and the step's
# name, unit and target: the steps of every program generated from one lowering share their
# epilogues, a check validates a fused step in legality and again once lowered (another
# tuple of the same posts), and a per-channel one has thousands of columns; the posts are
# kept with the answer, so their ids are not reused while the entry lives (the target is
# held weakly, as by `_VALIDATED`)
_POSTS: dict[tuple[int, int, int, str, str], tuple[Any, Any, list[ValidationIssue]]] = {}


def _posts_issues(
    step: NpuMatMul, caps: ComputeCaps, target: Target, op_name: str
) -> list[ValidationIssue]:
    """Issues of the step's epilogue: each distinct column's postprocessing, one table."""
    if isinstance(step.post, ColumnPosts) and caps.requant_scheme == "float32":
        alike = _column_posts_issues(step.post, step, caps, target, op_name)
        if alike is not None:
            return alike
    posts = posts_of(step.post)
    key = (id(posts[0]) if posts else 0, len(posts), id(target), op_name, step.name)
    hit = _POSTS.get(key)
    if hit is not None and hit[1]() is target and all(map(operator.is_, hit[0], posts)):
        return list(hit[2])
    out: list[ValidationIssue] = []
    # distinct objects first (an equality key hashes every field of thousands of columns)
    distinct = list({id(p): p for p in posts}.values())
    # every requantizer valid float32 on a float32 unit: no column has a requantization
    # issue (`_requant_issues` finds none), decided at once instead of per column
    rq_fine = caps.requant_scheme == "float32" and float32_requants_valid(
        [p.requant for p in distinct]
    )
    if not rq_fine:  # each distinct post's requantization issues, once
        distinct = list(dict.fromkeys(distinct))
    lut_memo: dict[tuple[int, str | None], tuple[LutParams, list[ValidationIssue]]] = {}
    stages: dict[tuple[Any, ...], list[ValidationIssue]] = {}  # by `_stage_key`
    for p in distinct:
        if not rq_fine:
            out += _requant_issues(p.requant, caps.requant_scheme, step.name)
        key2 = _stage_key(p)
        got = stages.get(key2)
        if got is None:
            got = stages[key2] = _stage_issues(p, step, caps, target, op_name, lut_memo)
        out += got
    luts = {(id(p.lut), p.function) for p in posts}
    if len(luts) > 1 and len({(p.lut, p.function) for p in posts}) > 1:
        out.append(
            ValidationIssue(
                "incomplete_parameters",
                step.name,
                "columns use different LUTs or functions; the postprocessor holds one table per "
                "MatMul: split the activation out",
            )
        )
    if len(_POSTS) >= 256:
        _POSTS.clear()
    _POSTS[key] = (posts, weakref.ref(target), list(out))
    return out


def _column_posts_issues(
    post: ColumnPosts, step: NpuMatMul, caps: ComputeCaps, target: Target, op_name: str
) -> list[ValidationIssue] | None:
    """`_posts_issues` of columns alike but for their scale, read from the first post and
    the scales, where every requantizer is a valid float32 one (None otherwise: read column
    by column). Every column's stage issues are then the first one's (`_stage_key` reads all
    but the scale), listed once per distinct post as the general reading lists them; they
    share one table."""
    if not post.requants_valid():
        return None
    return _stage_issues(post.first, step, caps, target, op_name) * post.distinct_count()


def _validate_matmul(step: NpuMatMul, target: Target) -> list[ValidationIssue]:
    op_name = step.compute
    caps = target.compute(op_name)
    if caps is None:
        return [
            ValidationIssue(
                "unsupported_function", step.name, f"target {target.name!r} has no {op_name} unit"
            )
        ]
    out: list[ValidationIssue] = []
    for t in (step.a_type, step.w_type):
        try:
            int_type(t)
        except KernelError as e:
            out.append(ValidationIssue("incomplete_parameters", step.name, str(e)))
    if step.structure not in caps.structures:
        out.append(
            ValidationIssue(
                "grouped_codegen_unsupported",
                step.name,
                f"{op_name} on target {target.name!r} cannot be scheduled as {step.structure!r}; "
                "use a 'plain' schedule",
            )
        )
    if step.w_input and (
        step.structure != "plain" or step.window is not None or per_column(step.post)
    ):
        out.append(
            ValidationIssue(
                "grouped_codegen_unsupported",
                step.name,
                "a MatMul whose second operand is computed at run time is generated in the "
                "'plain' structure only, with one epilogue for every column",
            )
        )
    if step.window is not None:
        out += window_issues(step, target, caps)
    out += _posts_issues(step, caps, target, op_name)
    if step.fused and step.structure not in caps.fused_structures:
        out.append(
            ValidationIssue(
                "grouped_codegen_unsupported",
                step.name,
                f"a fused {op_name} inside a {step.structure!r} structure cannot be generated on "
                f"target {target.name!r} (fused postprocessing only in "
                f"{sorted(caps.fused_structures)}); emit the unfused form for this site",
            )
        )
    # De-duplicate identical issues from identical columns.
    return list(dict.fromkeys(out))


def window_issues(
    step: NpuMatMul | NpuMaxPool, target: Target, caps: ComputeCaps | None = None
) -> list[ValidationIssue]:
    """A conv over a window the compute path does not compute (`window_*` in the target)."""
    win = step.window
    caps = caps or target.compute(step.compute)
    if win is None or caps is None:
        return []
    bad = []
    for what, vals, allowed in (
        ("kernel", win.kernel, caps.window_kernels),
        ("strides", win.strides, caps.window_strides),
        ("dilations", win.dilations, caps.window_dilations),
    ):
        if any(v not in allowed for v in vals):
            bad.append(f"{what} {list(vals)} (supported: {sorted(allowed)})")
    if win.group_kind not in caps.window_groups:
        bad.append(f"groups '{win.group_kind}' (supported: {sorted(caps.window_groups)})")
    if not bad:
        return []
    return [
        ValidationIssue(
            "unsupported_conv_window",
            step.name,
            f"the {step.compute} unit of target {target.name!r} does not compute this window: "
            + "; ".join(bad),
        )
    ]


def broadcast_kind(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> str:
    """How a two-input op's operands broadcast: "same" (as many elements as the output
    each), "inner" (ORT hands one operand to its kernel as one value per span of the
    innermost dimensions), "outer" (an operand repeats along outer dimensions only)."""
    out = np.broadcast_shapes(tuple(a_shape), tuple(b_shape))
    n = int(np.prod(out, dtype=np.int64))
    if int(np.prod(a_shape, dtype=np.int64)) == n == int(np.prod(b_shape, dtype=np.int64)):
        return "same"
    return "outer" if span_mode(a_shape, b_shape) is SpanMode.GENERAL else "inner"


def eltwise_issues(step: NpuEltwise, target: Target) -> list[ValidationIssue]:
    """Why the elementwise unit cannot run `step`: the op, type, broadcast or table."""
    caps = target.eltwise
    rec = step.record

    def bad(why: str, code: str = "unsupported_eltwise") -> list[ValidationIssue]:
        return [ValidationIssue(code, step.name, why)]

    if rec.binary not in caps.ops:
        return bad(
            f"the elementwise unit of target {target.name!r} has no {rec.binary} of two "
            f"activations (ops {sorted(caps.ops)}); it stays on the host"
        )
    if rec.dtype not in caps.types:
        return bad(f"the elementwise unit reads {sorted(caps.types)}, not {rec.dtype}")
    kind = broadcast_kind(step.a_shape, step.b_shape)
    if kind not in caps.broadcast:
        return bad(
            f"operand shapes {list(step.a_shape)} and {list(step.b_shape)} broadcast as "
            f"'{kind}'; the unit reads {sorted(caps.broadcast)}"
        )
    if rec.binary == "add" and rec.fma != caps.fma:
        return bad(f"the record's fma={rec.fma} is not the unit's fma={caps.fma}")
    if step.lut is not None:
        if step.function not in caps.functions:
            return bad(
                f"the elementwise unit applies no {step.function!r} table "
                f"(functions {sorted(caps.functions)})",
                "unsupported_function",
            )
        return _lut_issues(step.lut, step.function, target, step.name)
    return []


def validate_step(step: Step, target: Target) -> list[ValidationIssue]:
    """Issues that stop `step` from being emitted on `target` (empty when it is fine)."""
    if isinstance(step, NpuMatMul):
        return validate_matmul(step, target)
    if isinstance(step, NpuLut):
        lut_issues = _lut_issues(step.lut, step.function, target, step.name)
        if not lut_issues and step.function not in target.standalone.functions:
            lut_issues.append(
                ValidationIssue(
                    "unsupported_function",
                    step.name,
                    f"the standalone unit of target {target.name!r} does not support "
                    f"{step.function!r}; keep the activation on the host",
                )
            )
        return lut_issues
    if isinstance(step, NpuRequant):
        issues: list[ValidationIssue] = []
        rqs = step.requant if isinstance(step.requant, tuple) else (step.requant,)
        for rq in dict.fromkeys(rqs):
            issues += _requant_issues(rq, target.standalone.requant_scheme, step.name)
        return list(dict.fromkeys(issues))
    if isinstance(step, NpuEltwise):
        return eltwise_issues(step, target)
    if isinstance(step, NpuClip):
        if not target.standalone.clip:
            return [
                ValidationIssue(
                    "intervening_clip", step.name, "no standalone clip unit; keep it on the host"
                )
            ]
        if step.lo > step.hi:
            return [ValidationIssue("incomplete_parameters", step.name, "clip lo > hi")]
        return []
    if isinstance(step, NpuMaxPool):
        caps = target.compute(step.compute)
        if caps is None or not caps.max_pool:
            return [
                ValidationIssue(
                    "unsupported_function",
                    step.name,
                    f"target {target.name!r} has no {step.compute} unit taking a window's maximum",
                )
            ]
        return window_issues(step, target, caps)
    if isinstance(step, NpuConcat):
        if not target.standalone.moves:
            return [
                ValidationIssue(
                    "unsupported_op", step.name, "no data movement unit; keep it on the host"
                )
            ]
        return (
            []
            if step.xs and step.axis >= 0
            else [ValidationIssue("incomplete_parameters", step.name, "malformed concat")]
        )
    if isinstance(step, NpuMove):
        if not target.standalone.moves:
            return [
                ValidationIssue(
                    "unsupported_op", step.name, "no data movement unit; keep it on the host"
                )
            ]
        if len(step.shape) != len(step.strides) or step.offset < 0:
            return [ValidationIssue("incomplete_parameters", step.name, "malformed gather")]
        return []
    if isinstance(step, HostOnnx):
        if not step.model or not step.outputs:
            return [
                ValidationIssue(
                    "incomplete_parameters", step.name, "host ONNX step without a model or outputs"
                )
            ]
        return []
    if isinstance(step, HostKernel):
        return []
    return [ValidationIssue("incomplete_parameters", str(step), "unknown step kind")]


def validate_program(program, target: Target) -> list[ValidationIssue]:
    """Check emitted instructions: descriptors complete, tables and parameters loaded before use.

    A table slot must hold exactly the table an instruction expects (allocated by an
    earlier TableLoad and not overwritten since); a MatMul with postprocessing needs
    its parameter record loaded; a MatMul without postprocessing carries no fusion fields.
    """
    from .isa import Activation, MatMul, ParamLoad, TableLoad, strip_tables, table_of

    issues: list[ValidationIssue] = []
    slots: dict[int, str] = {}
    records: dict[int, object] = {}
    consts = program.constants
    slot_bytes = target.tables.slot_bytes

    def bad(name: str, msg: str, code: str = "incomplete_parameters") -> None:
        issues.append(ValidationIssue(code, name, msg))

    def check_table(name: str, slot, addr, table) -> None:
        if slot is None or addr is None:
            bad(name, "table address missing in the descriptor; allocate a table slot")
        elif not 0 <= slot < target.tables.slots or addr != slot * slot_bytes:
            bad(name, f"table address {addr} (slot {slot}) is not a table slot of this target")
        elif slot not in slots:
            bad(name, f"table slot {slot} not yet allocated; emit a TableLoad before this op")
        elif tuple(int(v) for v in consts[slots[slot]]) != tuple(table):
            bad(name, f"table slot {slot} holds another table; reload the table before this op")

    for ins in program.instructions:
        if isinstance(ins, TableLoad):
            if not 0 <= ins.slot < target.tables.slots:
                bad(
                    ins.table,
                    f"table slot {ins.slot} out of range (target has {target.tables.slots})",
                )
            elif ins.addr != ins.slot * slot_bytes or ins.table not in consts:
                bad(ins.table, "table load with a wrong address or unknown table")
            else:
                slots[ins.slot] = ins.table
        elif isinstance(ins, ParamLoad):
            records[ins.addr] = ins.post
        elif isinstance(ins, MatMul):
            if ins.tile is not None or ins.cols is not None:
                bad_tile = _tile_issue(ins, consts)
                if bad_tile:
                    bad(ins.name, bad_tile)
                    continue
            if not ins.post_enable:
                stray = [
                    f
                    for f in (
                        "post",
                        "param_addr",
                        "function",
                        "table_slot",
                        "table_addr",
                        "intermediate_type",
                    )
                    if getattr(ins, f) is not None
                ]
                if stray:
                    bad(
                        ins.name,
                        f"fusion attributes {stray} left on a MatMul without "
                        "postprocessing; clear them or enable postprocessing",
                    )
                continue
            if ins.post is None:
                bad(ins.name, "postprocessing enabled without a descriptor; attach the epilogue")
                continue
            if ins.param_addr is None or records.get(ins.param_addr) != strip_tables(ins.post):
                bad(ins.name, "parameter record not loaded before the MatMul; emit a ParamLoad")
            table = table_of(ins.post)
            if table is not None:
                if ins.function is None:
                    bad(ins.name, "LUT without a function selection in the descriptor")
                check_table(ins.name, ins.table_slot, ins.table_addr, table)
            elif ins.function is not None or ins.table_slot is not None:
                bad(
                    ins.name,
                    "fusion attributes left on a node without a LUT; clear the "
                    "function selection and table address",
                )
        elif isinstance(ins, Activation):
            t = consts.get(slots.get(ins.table_slot, ""), None)
            if t is None:
                bad(
                    ins.name,
                    f"table slot {ins.table_slot} not yet allocated; emit a TableLoad "
                    "before this activation",
                )
    return issues


def _tile_issue(ins, consts) -> str | None:
    """What is wrong with a tiled MatMul's column range, tile and per-column fields."""
    if ins.tile is None or ins.cols is None:
        return "a tiled MatMul needs both its column range and its tile; regenerate the program"
    tm, tn, tk = ins.tile
    n0, n1 = ins.cols
    w = consts.get(ins.w)
    n = None if w is None or np.ndim(w) != 2 else np.shape(w)[1]
    if min(tm, tn, tk) <= 0 or n is None or not 0 <= n0 < n1 <= n or n1 - n0 > tn:
        return f"column range {ins.cols} / tile {ins.tile} invalid for its weights"
    width = n1 - n0
    if per_column(ins.post) and len(ins.post) != width:
        return f"{len(ins.post)} column epilogues for the {width} columns {ins.cols}"
    if isinstance(ins.w_zp, tuple) and len(ins.w_zp) != width:
        return f"{len(ins.w_zp)} weight zero points for the {width} columns {ins.cols}"
    return None
