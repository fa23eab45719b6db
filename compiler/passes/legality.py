"""Structural legality: one rule per function; its docstring is the user-facing reason.

Each rule is registered with its reason code and the user's action
(`@rule(ReasonCode.X, action=...)`, `compiler.ir.reasons`) and is pure: it reads the
graph, the site and the configuration and returns None when the site passes, a
message naming the nodes, or a `Reason` with the backend validation's own code. The
first failing rule rejects the site; a rejected site leaves the graph exactly as it
was. Rules run in registration order (`RULES`).

`judge` runs the rules, then builds the site's postprocessing descriptor once and asks
the backend's step validation (pure too). The pass (`run`) does what they must not:
before them it reads ORT's float bias group of each site (`site.float_bias`, which the
rules and the descriptor read), after them it rejects the site or stores its descriptor
(`site.post`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compiler.ir import eltwise_site
from compiler.ir.epilogue import absorbed_requantizes, npu_function
from compiler.ir.graph import LAYOUT_OPS, Graph
from compiler.ir.layout import first_moved, strip_leading_ones
from compiler.ir.npu_step import compute_kind
from compiler.ir.reasons import Reason, Rule, RuleResult, rule, rules
from compiler.ir.site import Site
from compiler.proving.fixed_synthesis import chooses_index_type
from prover.inttypes import int_type
from prover.lut import LOADED_TABLE
from prover.verdict import ReasonCode, Status

ABSORBABLE = ("requantize", "clip", "lut", "qlinear_binary", *LAYOUT_OPS)
SCHEME_FAMILY = {"double": "fixed_double", "single": "fixed_single", "float": "float32"}


def _names(nodes) -> str:
    return ", ".join(f"'{o}'" for n in nodes for o in n.origin)


def region_refusal(site: Site, code: ReasonCode | None = None, ctx=None) -> Reason | None:
    """The refusal the frontend recorded for the site's unary region (of `code` only, when
    given), or None. With `ctx`, a region of 16-bit codes says which table sizes the
    site's compute path has (`table_size_refusal`)."""
    mark = site.activation.attrs.get("region_refusal")
    if mark is None or (code is not None and mark["code"] != code.value):
        return None
    r = Reason(ReasonCode(mark["code"]), mark["message"])
    if ctx is not None and r.code == ReasonCode.UNSUPPORTED_INTERMEDIATE_TYPE:
        return Reason(r.code, f"{r.message}; {table_size_refusal(site, ctx)}")
    return r


def table_size_refusal(site: Site, ctx) -> str:
    """Why a region of 16-bit codes is not fused on the site's compute path: the path's own
    table sizes (`lut_sizes`), never another path's."""
    kind = compute_kind(site.compute)
    caps = ctx.target.compute(kind)
    if caps is None:
        return f"target '{ctx.target.name}' has no {kind} unit"
    sizes = sorted(caps.lut_sizes)
    if 65536 not in caps.lut_sizes:
        return f"the {kind} postprocessor of '{ctx.target.name}' has tables of {sizes} entries"
    return (
        f"the {kind} postprocessor of '{ctx.target.name}' lists 65536-entry tables, but region "
        "tables are taken (and position-checked) for 8-bit codes only"
    )


@rule(
    ReasonCode.REGION_SECOND_INPUT,
    action="keep the original; only a region whose other operands are single constants is "
    "one table of its input code",
)
def rule_region_single_input(g: Graph, site: Site, ctx) -> RuleResult:
    """An op of the elementwise region after the compute op takes a second non-constant
    input (or a constant of several values): the region is not a function of one quantized
    value, so it is not one table. (A region the frontend refused for a reason with its own
    code, a value used outside it or 16-bit codes, is reported with that code.)"""
    r = region_refusal(site, ctx=ctx)
    if r is None or r.code in (ReasonCode.REGION_REDUCTION, ReasonCode.REGION_POSITION_DEPENDENT):
        return None
    return r if r.code != ReasonCode.REGION_SECOND_INPUT else r.message


@rule(
    ReasonCode.REGION_REDUCTION,
    action="keep the original; a reduction or data-movement op ends an elementwise region",
)
def rule_region_elementwise(g: Graph, site: Site, ctx) -> str | None:
    """A reduction (Softmax, ReduceMean, a normalization, a pool) or a data-movement op
    (Transpose, Reshape, Gather, Concat, ...) sits inside the region before its quantized
    output: an element of the result depends on other elements, so it is no table of one
    code."""
    r = region_refusal(site, ReasonCode.REGION_REDUCTION)
    return None if r is None else r.message


@rule(
    ReasonCode.REGION_POSITION_DEPENDENT,
    action="keep the region on the host; report the ONNX Runtime kernel that computes an "
    "element differently by its position",
)
def rule_region_position_independent(g: Graph, site: Site, ctx) -> str | None:
    """ONNX Runtime computed some code of the region differently at another position,
    tensor length or thread count (a vectorised body against its scalar tail, a chunk
    boundary): a table taken by evaluating every code once would not be what the reference
    computes, so the region is not fused."""
    r = region_refusal(site, ReasonCode.REGION_POSITION_DEPENDENT)
    return None if r is None else r.message


@rule(
    ReasonCode.ALREADY_FUSED,
    action="keep the original; enable table composition (compose_tables) to fuse both as one "
    "proven table",
)
def rule_already_fused(g: Graph, site: Site, ctx) -> str | None:
    """The producer already carries a postprocessing function: a second activation is never
    written over the first; two tables are composed into one only as a proven rewrite
    (compose_tables)."""
    if site.compute.op == "fused":
        return (
            f"{_names([site.compute])} already carries the fused function "
            f"'{site.compute.attrs['post_function']}'; {_names([site.activation])} stays a separate op"
        )
    inner = [n for n in site.chain[:-1] if n.op == "lut"]
    if inner and not ctx.compose_tables:
        return (
            f"{_names(inner)} would already be fused into {_names([site.compute])}; "
            f"{_names([site.activation])} stays a separate op (table composition disabled)"
        )
    return None


@rule(
    ReasonCode.MULTIPLE_USERS,
    action="keep the original; fuse only where the compute result has a single user",
)
def rule_single_user(g: Graph, site: Site, ctx) -> str | None:
    """The compute result (or a value between it and the activation) is also used by another
    node or is a graph output: the other branch keeps its value and nothing is fused."""
    for n in [site.compute, *site.chain[:-1]]:
        v = n.output
        others = [u for u in g.users(v) if u not in site.chain]
        if others or v in g.outputs:
            who = ", ".join(
                [f"'{o}'" for u in others for o in u.origin]
                + (["a graph output"] if v in g.outputs else [])
            )
            return f"value '{v}' of {_names([n])} is also used by {who}"
    return None


@rule(
    ReasonCode.NOT_ADJACENT,
    action="keep the original; move the op between them out of the chain to enable fusion",
)
def rule_adjacent(g: Graph, site: Site, ctx) -> str | None:
    """The activation's input is not produced directly by the compute op (only requantize,
    a bias (a QLinearAdd, or ORT's float DequantizeLinear -> Add -> QuantizeLinear group
    after a QLinearMatMul), clip and layout ops may sit between them)."""
    fb = site.float_bias
    inside = set() if fb is None else set(range(fb.start, fb.end + 1))
    bad = [
        n
        for i, n in enumerate(site.chain[:-1])
        if i not in inside
        and n.op not in ABSORBABLE
        or n.op == "qlinear_binary"
        and n.attrs.get("binary") != "QLinearAdd"
    ]
    if bad:
        ops = ", ".join(dict.fromkeys(str(n.attrs.get("onnx_op", n.op)) for n in bad))
        msg = f"{_names(bad)} ({ops}) between {_names([site.compute])} and {_names([site.activation])}"
        if any(n.op == "host_onnx" and n.attrs.get("onnx_op") == "Add" for n in bad):
            msg += (
                "; a bias Add between DequantizeLinear and QuantizeLinear runs in float (ONNX "
                "Runtime makes no int8 QLinearAdd on x86): quantize with uint8 activations "
                "(QuantType.QUInt8, ORT's default) or in QOperator format to get a QLinearAdd "
                "the postprocessor can fuse"
            )
        return msg
    return None


@rule(
    ReasonCode.UNSUPPORTED_FUNCTION,
    action="keep the activation standalone, or choose a target that supports it on this "
    "compute path",
)
def rule_function_supported(g: Graph, site: Site, ctx) -> str | None:
    """This compute path does not support this activation on this target (support on one
    path, e.g. Conv, says nothing about another, e.g. MatMul): it neither builds the
    function nor loads any table of its size (`table`), or the activation is a unary region
    of a kind the path does not declare (`regions`)."""
    if region_refusal(site) is not None:
        return None  # no table: the region's own rule says why
    kind = compute_kind(site.compute)
    caps = ctx.target.compute(kind)
    f = site.activation.attrs["function"]
    if caps is None:
        return f"target '{ctx.target.name}' has no {kind} unit with postprocessing"
    undeclared = region_kind_unsupported(site, ctx)
    if undeclared is not None:
        return undeclared
    if npu_function(site.activation, caps.functions) not in caps.functions:
        return (
            f"{kind} postprocessing on target '{ctx.target.name}' does not support '{f}' "
            f"(supported: {', '.join(sorted(caps.functions))}) for {_names([site.activation])}"
        )
    return None


def region_kind_unsupported(site: Site, ctx) -> str | None:
    """Why a unary region's table (a `lut` of source "region" in the site) is not one the
    site's compute path declares (`[compute.X] regions`), or None. Only that path's own
    list counts: another path's, the standalone unit's or a similar function's never."""
    kind = compute_kind(site.compute)
    caps = ctx.target.compute(kind)
    for n in site.chain:
        if n.op != "lut" or n.attrs.get("source") != "region":
            continue
        k = str(n.attrs["function"])
        if k not in caps.regions:
            have = ", ".join(sorted(caps.regions)) or "none"
            return (
                f"the {kind} postprocessor of '{ctx.target.name}' declares no '{k}' region for "
                f"{_names([n])} (its regions: {have})"
            )
    return None


@rule(
    ReasonCode.INTERVENING_REQUANTIZE,
    action="keep the original, or fold the requantize into the compute op's own scale",
)
def rule_requantize_reproducible(g: Graph, site: Site, ctx) -> str | None:
    """A requantize between the compute op and the activation that the target's single
    postprocessing requantization stage cannot reproduce (a second requantization the
    table cannot absorb, or a rounding scheme the hardware does not implement, or a
    QLinearAdd bias placed where the postprocessor cannot add it: `bias_placement`). A
    second requantization of an 8-bit code is absorbed into the table where the path
    loads any table of that size (`absorbed_requantizes`)."""
    if site.compute.op == "host_onnx":
        return None
    misplaced = bias_placement(site, ctx)
    if misplaced is not None:
        return misplaced
    absorbed = {id(n) for n in absorbed_requantizes(site, ctx.target)}
    rqs = [n for n in site.chain if n.op == "requantize" and id(n) not in absorbed]
    own = site.compute.attrs.get("requant") is not None
    if own and rqs:
        return (
            f"{_names(rqs)} requantizes again after {_names([site.compute])}'s own requantization; "
            f"the postprocessor has one requantization stage{_why_not_absorbed(site, ctx)}"
        )
    if len(rqs) > 1:
        return (
            f"{_names(rqs)}: {len(rqs)} requantizations; the postprocessor has one stage"
            f"{_why_not_absorbed(site, ctx)}"
        )
    if rqs:
        caps = ctx.target.compute(compute_kind(site.compute))
        fam = SCHEME_FAMILY[rqs[0].attrs["scheme"]]
        if fam != caps.requant_scheme:
            return (
                f"{_names(rqs)} rounds with scheme '{rqs[0].attrs['scheme']}' but the {compute_kind(site.compute)} "
                f"postprocessor of '{ctx.target.name}' implements '{caps.requant_scheme}'"
            )
    return None


def _why_not_absorbed(site: Site, ctx) -> str:
    caps = ctx.target.compute(compute_kind(site.compute))
    if caps is not None and LOADED_TABLE not in caps.functions:
        return (
            f", and the {compute_kind(site.compute)} postprocessor of '{ctx.target.name}' "
            f"loads no table as given ('{LOADED_TABLE}') that could absorb another"
        )
    return ""


def bias_placement(site: Site, ctx) -> str | None:
    """A QLinearAdd bias the postprocessor cannot place: it must follow the requantization
    and precede any clip or table, one per site; without a post-requantization add stage
    (target `bias`) it is folded into the accumulator, which needs the compute op's own
    float requantization (a QLinearMatMul/QGemm scale) to fold into."""
    adds = [i for i, n in enumerate(site.chain) if n.op == "qlinear_binary"]
    if site.float_bias is not None:
        adds.append(site.float_bias.start)
    if not adds or site.compute.op == "host_onnx":
        return None
    if len(adds) > 1:
        return (
            f"{_names([site.chain[i] for i in adds])}: {len(adds)} adds; the postprocessor has one"
        )
    i = adds[0]
    add = site.chain[i]
    own = site.compute.attrs.get("requant") is not None
    rq = [k for k, n in enumerate(site.chain) if n.op == "requantize"]
    if not own and not (rq and rq[0] < i):
        return f"{_names([add])} adds before any requantization of {_names([site.compute])}"
    late = [n for n in site.chain[:i] if n.op in ("clip", "lut")]
    if late:
        return f"{_names(late)} sits between the requantization and the bias {_names([add])}"
    caps = ctx.target.compute(compute_kind(site.compute))
    if "requantized" not in caps.bias and not own:
        return (
            f"{_names([add])} follows the standalone requantize {_names([site.chain[rq[0]]])}; "
            f"'{ctx.target.name}' has no post-requantization add stage and the bias can only be "
            "folded into a compute op's own requantization"
        )
    return None


@rule(
    ReasonCode.INTERVENING_CLIP,
    action="keep the original, or move the clip after the requantization",
)
def rule_clip_absorbable(g: Graph, site: Site, ctx) -> str | None:
    """A clip between the compute op and the activation that cannot be absorbed: only a clip
    on the table's input (after requantization) can be composed into the table."""
    if site.compute.op == "host_onnx" or site.compute.attrs.get("requant") is not None:
        return None
    for n in site.chain:
        if n.op == "requantize":
            return None
        if n.op == "clip":
            return f"{_names([n])} clips the int32 accumulator before the requantization"
    return None


@rule(
    ReasonCode.LAYOUT_MISMATCH,
    action="keep the original; remove the transpose/permuting reshape between the ops",
)
def rule_layout(g: Graph, site: Site, ctx) -> str | None:
    """Element correspondence or memory layout differs between the compute output and the
    activation (a hidden transpose or permuting reshape); only leading unit dimensions may
    differ, and that correspondence is proven as an index-map obligation."""
    ops = [n for n in site.chain if n.op in ("reshape", "transpose")]
    if not ops:
        return None
    src = g.values[site.compute.output].shape
    moved = first_moved(src, ops)
    if moved is not None:
        out_idx, src_idx = moved
        return (
            f"{_names(ops)} moves elements: output index {list(out_idx)} holds compute element "
            f"{list(src_idx)} (first index that moves)"
        )
    dst = g.values[ops[-1].output].shape
    if strip_leading_ones(src) != strip_leading_ones(dst):
        return (
            f"{_names(ops)} changes shape {list(src)} to {list(dst)} beyond leading unit dimensions"
        )
    return None


@rule(
    ReasonCode.UNSUPPORTED_INTERMEDIATE_TYPE,
    action="keep the original, or requantize to a type the target supports",
)
def rule_intermediate_type(g: Graph, site: Site, ctx) -> str | None:
    """The intermediate storage type (the table's input), the table size or the output
    encoding is not one the target's postprocessing supports."""
    if region_refusal(site) is not None and site.activation.op != "lut":
        return None  # no table: the region's own rule says why
    caps = ctx.target.compute(compute_kind(site.compute))
    act = site.activation
    it = act.attrs["in_type"]
    # With synthesis the NPU index type is the compiler's choice (fixed_synthesis.index_type)
    if it not in caps.intermediate_types and not _index_type_chosen(site, ctx):
        return (
            f"intermediate type {it} before {_names([act])} is not supported by {compute_kind(site.compute)} "
            f"postprocessing (supported: {', '.join(sorted(caps.intermediate_types))})"
        )
    size = int_type(it).size
    if size not in caps.lut_sizes:
        return f"a {size}-entry table is not supported (supported: {sorted(caps.lut_sizes)})"
    if act.attrs["out_type"] not in ("int8", "uint8"):
        return f"output encoding {act.attrs['out_type']} is not supported"
    return None


@rule(
    ReasonCode.GROUPED_CODEGEN_UNSUPPORTED,
    action="disable this fusion, keep the original graph, or change grouping (schedule the "
    "compute op in a structure the target can fuse)",
)
def rule_schedule(g: Graph, site: Site, ctx) -> str | None:
    """This fused computation cannot yet be generated in this scheduling structure: the
    structure (grouping/tiling) the compute op is scheduled in is not one the target fuses
    in (when it is decided: `--schedule-strategy`, compiler.ir.structure)."""
    from compiler.ir.structure import legality_problem

    return legality_problem(g, site, ctx)


@rule(
    ReasonCode.INCOMPLETE_PARAMETERS,
    action="keep the original; supply the missing quantization parameters or table",
)
def rule_parameters_complete(g: Graph, site: Site, ctx) -> RuleResult:
    """The table, its quantization parameters, the requantization header or the encodings
    are missing or invalid (the backend's own step validation is asked last, on the
    descriptor built once (`judge`); its issue code is reported as is)."""
    if site.compute.op == "host_onnx":
        return None
    for n in site.chain:
        if n.op == "lut":
            missing = [
                k
                for k in (
                    "table",
                    "function",
                    "in_type",
                    "out_type",
                    "in_scale",
                    "in_zp",
                    "out_scale",
                    "out_zp",
                )
                if n.attrs.get(k) is None
            ]
            if missing:
                return f"{_names([n])} lacks {', '.join(missing)}"
            if len(n.attrs["table"]) != int_type(n.attrs["in_type"]).size:
                return f"{_names([n])} has a table of {len(n.attrs['table'])} entries"
    return None


def descriptor(g: Graph, site: Site, ctx):
    """The site's postprocessing descriptor (per column group) and the backend's validation
    issues of the fused step built from it; or why it cannot be built (a message)."""
    from compiler.ir.epilogue import build_columns
    from compiler.ir.npu_step import validation_issues
    from compiler.ir.structure import fused_step

    try:
        groups = build_columns(site, ctx.target, compute_kind(site.compute))
    except Exception as e:  # noqa: BLE001 - any failure to build the descriptor is incomplete
        return f"cannot build the postprocessing descriptor: {e}"
    issues = validation_issues(fused_step(g, site, groups, ctx), ctx.target)
    if _index_type_chosen(site, ctx):  # the gate synthesises a supported index type
        issues = [i for i in issues if i.code != ReasonCode.UNSUPPORTED_INTERMEDIATE_TYPE]
    return groups, issues


def _index_type_chosen(site: Site, ctx) -> bool:
    caps = ctx.target.compute(compute_kind(site.compute))
    return (
        ctx.config.synthesis
        and caps is not None
        and chooses_index_type(caps, site.activation.attrs["in_type"])
    )


REGION_RULE = {
    ReasonCode.REGION_REDUCTION: ReasonCode.REGION_REDUCTION,
    ReasonCode.REGION_POSITION_DEPENDENT: ReasonCode.REGION_POSITION_DEPENDENT,
}


def _rules_by_code() -> dict[ReasonCode, Rule]:
    return {r.code: r for r in rules()}


RULES: list[tuple[str, Callable[..., RuleResult]]] = [(r.code.value, r.check) for r in rules()]


def first_failure(g: Graph, site: Site, ctx) -> tuple[Rule, Reason] | None:
    """The first failing rule and its reason, or None (pure: the site is not changed).

    A QDQ float compute group (host_onnx) is not judged structurally: whatever follows
    it, its float sum is the reason no fusion exists (the gate's `float_accumulation`),
    unless the unary region after it was refused (then that reason).
    """
    if site.compute.op == "host_onnx":
        refused = region_refusal(site, ctx=ctx)
        if refused is None:
            return None
        code = REGION_RULE.get(refused.code, ReasonCode.REGION_SECOND_INPUT)
        return _rules_by_code()[code], refused
    for r in rules():
        got = r.check(g, site, ctx)
        if isinstance(got, Reason):
            return r, got
        if got is not None:
            return r, Reason(r.code, got)
    return None


@dataclass(frozen=True)
class Judgement:
    """What legality says of one site: the reason it is rejected, or its descriptor."""

    reason: Reason | None
    post: Any = None  # the postprocessing descriptor (per column group) of a legal site
    issues: tuple[Any, ...] = ()  # the backend validation's issues (the first is the reason)


def judge(g: Graph, site: Site, ctx) -> Judgement:
    """The rules in order, then the descriptor, built once, and the backend's validation of
    the fused step built from it (pure: the site is not changed)."""
    if site.compute.op == "host_onnx" and region_refusal(site) is None:
        return Judgement(None)
    if eltwise_site.is_eltwise_site(site):
        return _judge_eltwise(g, site, ctx)
    bad = first_failure(g, site, ctx)
    if bad is not None:
        return Judgement(bad[1])
    built = descriptor(g, site, ctx)
    if isinstance(built, str):
        return Judgement(Reason(ReasonCode.INCOMPLETE_PARAMETERS, built))
    groups, issues = built
    if issues:
        first = issues[0]
        return Judgement(Reason(ReasonCode(first.code), first.message), issues=tuple(issues))
    return Judgement(None, groups)


# the seed's boundaries, shared with every compute op; the rest is the unit's own
ELTWISE_RULES = (
    ReasonCode.REGION_SECOND_INPUT,
    ReasonCode.REGION_REDUCTION,
    ReasonCode.REGION_POSITION_DEPENDENT,
    ReasonCode.MULTIPLE_USERS,
)


def _judge_eltwise(g: Graph, site: Site, ctx) -> Judgement:
    """A two-activation QLinearAdd/QLinearMul -> table site: the shared boundary rules,
    then adjacency, the unit's support and its table (`compiler.ir.eltwise_site`)."""
    by_code = _rules_by_code()
    for code in ELTWISE_RULES:
        got = by_code[code].check(g, site, ctx)
        if got is not None:
            return Judgement(got if isinstance(got, Reason) else Reason(code, got))
    unit = eltwise_site.judge(g, site, ctx.target)
    if isinstance(unit, Reason):
        return Judgement(unit)
    return Judgement(None, unit)


def float_bias_of(g: Graph, site: Site):
    """ORT's float bias group right after the compute op's own requantization, with its
    per-column tables (`compiler.ir.float_bias`, `compiler.ort.tables`), or None."""
    if site.compute.attrs.get("requant") is None or site.compute.op in ("host_onnx", "eltwise"):
        return None
    from compiler.ir.float_bias import recognize
    from compiler.ort.tables import float_bias_tables

    fb = recognize(g, site, site.compute.output)
    if fb is not None:
        fb.tables = float_bias_tables(g, site, fb)
    return fb


def run(g: Graph, ctx) -> Graph:
    """Read each site's float bias group, judge it, then reject the site or store its
    postprocessing descriptor (`site.post`) for the gate."""
    for site in ctx.sites:
        site.float_bias = float_bias_of(g, site)
        j = judge(g, site, ctx)
        if j.issues:
            site.details.append({"backend_issues": [str(i) for i in j.issues]})
        if j.reason is not None:
            site.decide(Status.REJECTED, j.reason.code, j.reason.message)
        elif j.post is not None:
            site.post = j.post
    return g
