"""Structural legality: one rule per function; its docstring is the user-facing reason.

Each rule returns None when the site passes, or a message naming the nodes. The
first failing rule rejects the site with its reason code (DESIGN.md); a rejected
site leaves the graph exactly as it was. Rules run in `RULES` order.
"""

from __future__ import annotations

from collections.abc import Callable

from compiler.ir.graph import LAYOUT_OPS, Graph
from compiler.ir.layout import first_moved, strip_leading_ones
from compiler.ir.site import Site
from prover.inttypes import int_type

ABSORBABLE = ("requantize", "clip", "lut", "qlinear_binary", *LAYOUT_OPS)
SCHEME_FAMILY = {"double": "fixed_double", "single": "fixed_single", "float": "float32"}


def _names(nodes) -> str:
    return ", ".join(f"'{o}'" for n in nodes for o in n.origin)


def _kind(site: Site) -> str:
    """The target compute unit of the site's compute op (a Gemm runs on the MatMul unit)."""
    k = site.compute.attrs.get("kind") or site.compute.attrs.get("compute") or "MatMul"
    return "MatMul" if k == "Gemm" else k


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


def rule_adjacent(g: Graph, site: Site, ctx) -> str | None:
    """The activation's input is not produced directly by the compute op (only requantize,
    a bias (a QLinearAdd, or ORT's float DequantizeLinear -> Add -> QuantizeLinear group
    after a QLinearMatMul), clip and layout ops may sit between them)."""
    fb = None
    if site.compute.attrs.get("requant") is not None:
        from compiler.frontend.float_bias import ort_tables, recognize

        fb = recognize(g, site, site.compute.output)
        if fb is not None:
            fb.tables = ort_tables(g, site, fb)
    site.float_bias = fb
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


def rule_function_supported(g: Graph, site: Site, ctx) -> str | None:
    """This compute path does not support this activation on this target (support on one
    path, e.g. Conv, says nothing about another, e.g. MatMul)."""
    kind = _kind(site)
    caps = ctx.target.compute(kind)
    f = site.activation.attrs["function"]
    if caps is None:
        return f"target '{ctx.target.name}' has no {kind} unit with postprocessing"
    if f not in caps.functions:
        return (
            f"{kind} postprocessing on target '{ctx.target.name}' does not support '{f}' "
            f"(supported: {', '.join(sorted(caps.functions))}) for {_names([site.activation])}"
        )
    return None


def rule_requantize_reproducible(g: Graph, site: Site, ctx) -> str | None:
    """A requantize between the compute op and the activation that the target's single
    postprocessing requantization stage cannot reproduce (a second requantization, or a
    rounding scheme the hardware does not implement, or a QLinearAdd bias placed where the
    postprocessor cannot add it: `bias_placement`)."""
    if site.compute.op == "host_onnx":
        return None
    misplaced = bias_placement(site, ctx)
    if misplaced is not None:
        return misplaced
    rqs = [n for n in site.chain if n.op == "requantize"]
    own = site.compute.attrs.get("requant") is not None
    if own and rqs:
        return (
            f"{_names(rqs)} requantizes again after {_names([site.compute])}'s own requantization; "
            "the postprocessor has one requantization stage"
        )
    if len(rqs) > 1:
        return f"{_names(rqs)}: {len(rqs)} requantizations; the postprocessor has one stage"
    if rqs:
        caps = ctx.target.compute(_kind(site))
        fam = SCHEME_FAMILY[rqs[0].attrs["scheme"]]
        if fam != caps.requant_scheme:
            return (
                f"{_names(rqs)} rounds with scheme '{rqs[0].attrs['scheme']}' but the {_kind(site)} "
                f"postprocessor of '{ctx.target.name}' implements '{caps.requant_scheme}'"
            )
    return None


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
    caps = ctx.target.compute(_kind(site))
    if "requantized" not in caps.bias and not own:
        return (
            f"{_names([add])} follows the standalone requantize {_names([site.chain[rq[0]]])}; "
            f"'{ctx.target.name}' has no post-requantization add stage and the bias can only be "
            "folded into a compute op's own requantization"
        )
    return None


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


def rule_intermediate_type(g: Graph, site: Site, ctx) -> str | None:
    """The intermediate storage type (the table's input), the table size or the output
    encoding is not one the target's postprocessing supports."""
    caps = ctx.target.compute(_kind(site))
    act = site.activation
    it = act.attrs["in_type"]
    if it not in caps.intermediate_types:
        return (
            f"intermediate type {it} before {_names([act])} is not supported by {_kind(site)} "
            f"postprocessing (supported: {', '.join(sorted(caps.intermediate_types))})"
        )
    size = int_type(it).size
    if size not in caps.lut_sizes:
        return f"a {size}-entry table is not supported (supported: {sorted(caps.lut_sizes)})"
    if act.attrs["out_type"] not in ("int8", "uint8"):
        return f"output encoding {act.attrs['out_type']} is not supported"
    return None


def rule_schedule(g: Graph, site: Site, ctx) -> str | None:
    """The chosen scheduling structure (grouping/tiling) of the compute op cannot generate
    the fused op on this target."""
    caps = ctx.target.compute(_kind(site))
    s = ctx.structure_of(site.compute.origin)
    if s not in caps.fused_structures:
        return (
            f"{_names([site.compute])} is scheduled as '{s}'; fused postprocessing on "
            f"'{ctx.target.name}' is generated only for {sorted(caps.fused_structures)}"
        )
    return None


def rule_parameters_complete(g: Graph, site: Site, ctx) -> str | tuple[str, str] | None:
    """The table, its quantization parameters, the requantization header or the encodings
    are missing or invalid (the backend's own step validation is asked last; its issue
    code is reported as is)."""
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
    from compiler.ir.epilogue import build_columns

    from .npu_step import fused_step, validation_issues

    try:
        groups = build_columns(site, ctx.target, _kind(site))
    except Exception as e:  # noqa: BLE001 - any failure to build the descriptor is incomplete
        return f"cannot build the postprocessing descriptor: {e}"
    issues = validation_issues(fused_step(g, site, groups, ctx), ctx.target)
    if issues:
        site.details.append({"backend_issues": [str(i) for i in issues]})
        return issues[0].code, issues[0].message
    site.post = groups
    return None


RULES: list[tuple[str, Callable]] = [
    ("already_fused", rule_already_fused),
    ("multiple_users", rule_single_user),
    ("not_adjacent", rule_adjacent),
    ("unsupported_function", rule_function_supported),
    ("intervening_requantize", rule_requantize_reproducible),
    ("intervening_clip", rule_clip_absorbable),
    ("layout_mismatch", rule_layout),
    ("unsupported_intermediate_type", rule_intermediate_type),
    ("grouped_codegen_unsupported", rule_schedule),
    ("incomplete_parameters", rule_parameters_complete),
]


def check_site(g: Graph, site: Site, ctx) -> tuple[str, str] | None:
    """(code, message) of the first failing rule, or None.

    A QDQ float compute group (host_onnx) is not judged structurally: whatever follows
    it, its float sum is the reason no fusion exists (the gate's `float_accumulation`).
    """
    if site.compute.op == "host_onnx":
        return None
    for code, rule in RULES:
        msg = rule(g, site, ctx)
        if isinstance(msg, tuple):
            return msg
        if msg is not None:
            return code, msg
    return None


def run(g: Graph, ctx) -> Graph:
    for site in ctx.sites:
        bad = check_site(g, site, ctx)
        if bad is not None:
            site.decide("rejected", bad[0], bad[1])
    return g
