"""Synthesised fixed-point epilogues for column groups whose rounded lowering is refuted.

The gate proves each column group's epilogue with the target's rounded parameters
(`npu_backend.target.requant_from_scale`). Where that is refuted and the target lets the
compiler choose its fixed-point parameters (`[compute.<op>] synthesis` in the target
TOML), `prover.synthesis` searches the whole declared space; a proposal replaces the
group's `PostProcess` only after `prover.api.check` proves it, like any other lowering.
Each attempt leaves one outcome per group for the report: `rounded` (the rounded
parameters were proven), `synthesised` (proposal proven) or `impossible` (no parameters
of the space exist; the conflicting accumulator pair is named).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from npu_backend.postprocess import LutParams, PostProcess, RequantParams
from npu_backend.target import SYNTHESIS_PARAMS
from prover.domain import KernelError
from prover.synthesis import SCHEMES, FixedEpilogue, FixedPointSpace, Synthesis, synthesize

CHOOSABLE = SYNTHESIS_PARAMS


@dataclass(frozen=True)
class Outcome:
    """What happened to one column group's requantization (a report line)."""

    columns: tuple[int, ...]
    kind: str  # "rounded" | "synthesised" | "impossible" | "refuted"
    message: str

    def to_dict(self) -> dict[str, object]:
        return {"columns": [self.columns[0], self.columns[-1]], "kind": self.kind,
                "message": self.message}  # fmt: skip


def space_for(caps, index_order: str, intermediate_type: str) -> FixedPointSpace | None:
    """The synthesis space a compute path declares, or None when it declares none."""
    chosen = frozenset(getattr(caps, "synthesis", frozenset()))
    if caps.requant_scheme not in SCHEMES or not {"multiplier", "shift", "table"} <= chosen:
        return None
    return FixedPointSpace(
        schemes=(caps.requant_scheme,),
        zero_point="free" if "zero_point" in chosen else "fixed",
        intermediate_type=intermediate_type,
        index_order=index_order,
    )


def synthesised_post(p: FixedEpilogue, like: PostProcess) -> PostProcess:
    """A `PostProcess` carrying synthesised parameters (output encoding of `like`)."""
    rq = RequantParams(p.scheme, p.zp, p.intermediate_type, multiplier=p.multiplier, shift=p.shift)
    lut = LutParams(p.table, p.intermediate_type, like.output_type, p.index_order, None)
    return PostProcess(
        requant=rq,
        clip=None,
        function=like.function or "table",
        lut=lut,
        out_type=like.output_type,
        out_zp=like.output_zp,
    )


def synthesise_group(grp, columns: tuple[int, ...], lo: int, hi: int, space: FixedPointSpace):
    """(new group for `columns` or None, the `Synthesis`) for a refuted group over [lo, hi]."""
    try:
        s: Synthesis = synthesize(grp.before, "acc", lo, hi, space)
    except KernelError as e:
        return None, e
    if s.params is None:
        return None, s
    fields = {"columns": tuple(columns), "post": synthesised_post(s.params, grp.post)}
    if any(f.name == "acc_offset" for f in dataclasses.fields(grp)):
        fields["acc_offset"] = 0  # the synthesised epilogue reads the accumulator itself
    return dataclasses.replace(grp, **fields), s


def describe(s: Synthesis | Exception) -> str:
    """One line for the report."""
    if isinstance(s, Exception):
        return f"synthesis not applicable: {s}"
    if s.params is not None:
        p = s.params
        return (f"synthesised multiplier={p.multiplier} shift={p.shift} zp={p.zp} "
                f"({s.change_points} reference steps, {s.time_ms:.0f} ms)")  # fmt: skip
    why = s.conflict.message() if s.conflict is not None else "none found"
    return f"no {'/'.join(CHOOSABLE)} on this target works: {why}"


def _compute_kind(node) -> str:
    k = node.attrs.get("kind") or "MatMul"
    return "MatMul" if k == "Gemm" else k


def resynthesise(site, verdicts: list, ctx, check_fn) -> list:
    """Replace each refuted epilogue verdict by a synthesised group's, where one is proven.

    `verdicts`: the gate's `(obligation, verdict, columns, lift column)` list; `check_fn(ob,
    ctx)` decides an obligation (the gate's cached `check`). `site.post` gains the proven
    synthesised groups; `site.details` gets one `requant` entry per epilogue group.
    Returns the new verdict list.
    """
    caps = ctx.target.compute(_compute_kind(site.compute))
    order = ctx.target.lut_builder.index_order
    out, outcomes = [], []
    for ob, v, cols, lift_col in verdicts:
        refuted = not isinstance(v, Exception) and v.status == "refuted"
        if ob.kind != "epilogue" or not cols:
            out.append((ob, v, cols, lift_col))
            continue
        if not refuted:
            if not isinstance(v, Exception) and v.status == "proven":
                outcomes.append(Outcome(cols, "rounded", "rounded parameters proven"))
            out.append((ob, v, cols, lift_col))
            continue
        grp = next(g for g in site.post if cols[0] in g.columns)
        space = None if caps is None else space_for(caps, order, grp.post.requant.out_type)
        if space is None:
            outcomes.append(Outcome(cols, "refuted", "the target declares no synthesis space"))
            out.append((ob, v, cols, lift_col))
            continue
        lo, hi = ob.ranges["acc"]
        new, s = synthesise_group(grp, cols, lo, hi, space)
        if new is None:
            outcomes.append(Outcome(cols, "impossible", describe(s)))
            out.append((ob, v, cols, lift_col))
            continue
        ob2 = dataclasses.replace(ob, after=new.after(_acc()), note=f"{ob.note} synthesised")
        v2 = check_fn(ob2, ctx)
        if isinstance(v2, Exception) or v2.status != "proven":
            why = v2 if isinstance(v2, Exception) else v2.status
            outcomes.append(Outcome(cols, "refuted", f"{describe(s)}; not proven: {why}"))
            out.append((ob, v, cols, lift_col))
            continue
        _split(site, grp, new)
        outcomes.append(Outcome(cols, "synthesised", describe(s) + "; proven"))
        out.append((ob2, v2, cols, lift_col))
    if any(o.kind != "rounded" for o in outcomes):
        site.details.append({"requant": [o.to_dict() for o in outcomes]})
    return out


def summary(site) -> str:
    """'k of n column groups synthesised ...' for a site's report line ('' if none)."""
    for d in site.details:
        if "requant" in d:
            kinds = [o["kind"] for o in d["requant"]]
            parts = [f"{kinds.count(k)} {k}" for k in ("rounded", "synthesised", "impossible",
                                                        "refuted") if kinds.count(k)]  # fmt: skip
            return f"requantization of {len(kinds)} column groups: " + ", ".join(parts)
    return ""


def refuted_note(site, columns: tuple[int, ...]) -> str:
    """'; <what synthesis found>' for the refuted group `columns` ('' when not tried)."""
    for d in site.details:
        for o in d.get("requant", ()):
            if o["columns"][0] == columns[0] and o["kind"] != "rounded":
                return f"; {o['message']}"
    return ""


def _split(site, grp, new) -> None:
    rest = tuple(j for j in grp.columns if j not in set(new.columns))
    i = site.post.index(grp)
    repl = [new] if not rest else [dataclasses.replace(grp, columns=rest), new]
    site.post[i : i + 1] = repl


def _acc():
    from prover.terms import Var

    return Var("acc")
