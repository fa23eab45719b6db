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

from compiler.ir.npu_step import compute_kind
from npu_backend.postprocess import LutParams, PostProcess, RequantParams
from npu_backend.target import SYNTHESIS_PARAMS
from prover.domain import KernelError
from prover.inttypes import int_type
from prover.shared_table import synthesize_shared
from prover.synthesis import (
    SCHEMES,
    FixedEpilogue,
    FixedPointSpace,
    Synthesis,
    synthesize,
)
from prover.terms import Var
from prover.verdict import ReasonCode, Status

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
    """The synthesis space a compute path declares, or None when it declares none.

    The NPU index type is `intermediate_type` when the hardware has it; otherwise, when the
    compiler chooses zero point and table, a supported type of the same width (a uint8
    reference index becomes an int8 one: same 256 entries, the zero point absorbs the
    offset); else None."""
    chosen = frozenset(caps.synthesis)
    if caps.requant_scheme not in SCHEMES or not {"multiplier", "shift", "table"} <= chosen:
        return None
    index = index_type(caps, intermediate_type)
    if index is None:
        return None
    return FixedPointSpace(
        schemes=(caps.requant_scheme,),
        zero_point="free" if "zero_point" in chosen else "fixed",
        intermediate_type=index,
        index_order=index_order,
    )


def index_type(caps, intermediate_type: str) -> str | None:
    """The index type the NPU can use for a reference intermediate type (None: none)."""
    if intermediate_type in caps.intermediate_types:
        return intermediate_type
    if not {"zero_point", "table"} <= frozenset(caps.synthesis):
        return None
    bits = int_type(intermediate_type).bits
    same = sorted(t for t in caps.intermediate_types if int_type(t).bits == bits)
    return same[0] if same else None


def chooses_index_type(caps, intermediate_type: str) -> bool:
    """Whether synthesis may replace an intermediate type the hardware lacks (legality)."""
    return (
        intermediate_type not in caps.intermediate_types
        and space_for(caps, "offset", intermediate_type) is not None
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
    post = synthesised_post(s.params, grp.post)
    return dataclasses.replace(grp, columns=tuple(columns), post=post, **_no_offset(grp)), s


def describe(s: Synthesis | Exception) -> str:
    """One line for the report."""
    if isinstance(s, Exception):
        return f"synthesis not applicable: {s}"
    if s.params is not None:
        p = s.params
        return (f"synthesised multiplier={p.multiplier} shift={p.shift} zp={p.zp} "
                f"({s.change_points} reference steps)")  # fmt: skip
    why = s.conflict.message() if s.conflict is not None else "none found"
    return f"no {'/'.join(CHOOSABLE)} on this target works: {why}"


def resynthesise(site, verdicts: list, ctx, check_fn) -> list:
    """Replace each refuted epilogue verdict by a synthesised group's, where one is proven.

    `verdicts`: the gate's `(obligation, verdict, columns, lift column)` list; `check_fn(ob,
    ctx)` decides an obligation (the gate's cached `check`). `site.post` gains the proven
    synthesised groups; `site.details` gets one `requant` entry per epilogue group.
    A group whose intermediate type the hardware lacks is synthesised even when its rounded
    form is proven (that form cannot run). When the groups end up with different tables,
    one table shared by all is searched (the postprocessor holds one per MatMul).
    Targets that declare no synthesis space are left alone. Returns the new verdict list.
    """
    caps = ctx.target.compute(compute_kind(site.compute))
    if caps is None or not caps.synthesis:
        return verdicts
    order = ctx.target.lut_builder.index_order
    rounded_post = list(site.post)
    out, outcomes = [], []
    for ob, v, cols, lift_col in verdicts:
        if ob.kind != "epilogue" or not cols:
            out.append((ob, v, cols, lift_col))
            continue
        grp = next(g for g in site.post if cols[0] in g.columns)
        it = grp.post.requant.out_type
        status = None if isinstance(v, Exception) else v.status
        if not _replaceable(v) and it in caps.intermediate_types:
            if status == Status.PROVEN:
                outcomes.append(Outcome(cols, "rounded", "rounded parameters proven"))
            out.append((ob, v, cols, lift_col))
            continue
        space = space_for(caps, order, it)
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
        ob2, v2 = _prove(ob, new, check_fn, ctx)
        if isinstance(v2, Exception) or v2.status != Status.PROVEN:
            why = v2 if isinstance(v2, Exception) else v2.status
            outcomes.append(Outcome(cols, "refuted", f"{describe(s)}; not proven: {why}"))
            out.append((ob, v, cols, lift_col))
            continue
        _split(site, grp, new)
        site.unrelied.append(ob.hash)
        outcomes.append(Outcome(cols, "synthesised", describe(s) + "; proven"))
        out.append((ob2, v2, cols, lift_col))
    if all(o.kind in ("rounded", "synthesised") for o in outcomes):
        out, outcomes = _share_table(site, out, outcomes, caps, order, ctx, check_fn)
    else:  # the site is not fused: its descriptor (and any replay) stays the rounded one
        site.post[:] = rounded_post
    if any(o.kind != "rounded" for o in outcomes):
        site.details.append({"requant": [o.to_dict() for o in outcomes]})
        site.details.append(_report_check(site, outcomes))
    _reject_unlowerable(site, out, caps)
    return out


def _replaceable(v) -> bool:
    """Whether a group's rounded verdict calls for synthesis: refuted, or (read-only store)
    without a record. An `rw` run stores no record of a rounded refutation that synthesis
    replaces (it is never reported, so never lifted), so in `ro` mode a missing one is what
    that run left; the synthesised parameters still need their own trusted record."""
    from prover.errors import StoreMiss

    return isinstance(v, StoreMiss) or (not isinstance(v, Exception) and v.status == Status.REFUTED)


def _report_check(site, outcomes: list[Outcome]) -> dict[str, object]:
    """The per-group outcomes as a report check (JSON `checks`): held when every group's
    parameters are proven and one table serves them all."""
    shared = any("shared_table" in d for d in site.details)
    ok = all(o.kind in ("rounded", "synthesised") for o in outcomes) and not shared
    return {
        "check": "requant_synthesis",
        "status": "held" if ok else "violated",
        "message": summary(site),
        "groups": [o.to_dict() for o in outcomes],
    }


def _reject_unlowerable(site, verdicts: list, caps) -> None:
    """A proven group whose intermediate type the hardware lacks (synthesis found nothing)
    cannot run: the site is rejected with the reason (the gate keeps a decided verdict)."""
    for ob, v, cols, _ in verdicts:
        if (
            ob.kind != "epilogue"
            or not cols
            or isinstance(v, Exception)
            or v.status != Status.PROVEN
        ):
            continue
        grp = next(g for g in site.post if cols[0] in g.columns)
        it = grp.post.requant.out_type
        if it not in caps.intermediate_types:
            site.unrelied += [
                x[0].hash for x in verdicts if x[0].kind == "epilogue" and _replaceable(x[1])
            ]
            site.decide(
                Status.REJECTED,
                ReasonCode.UNSUPPORTED_INTERMEDIATE_TYPE,
                f"columns {cols[0]}..{cols[-1]}: intermediate type {it} is not supported "
                f"(supported: {', '.join(sorted(caps.intermediate_types))}) and no synthesised "
                "parameters with a supported index type were proven" + refuted_note(site, cols),
            )
            return


def _prove(ob, new, check_fn, ctx):
    ob2 = dataclasses.replace(ob, after=new.after(Var("acc")), note=f"{ob.note} synthesised")
    return ob2, check_fn(ob2, ctx)


def _share_table(site, verdicts, outcomes, caps, order, ctx, check_fn):
    """One table for every epilogue group of the site (`prover.shared_table.synthesize_shared`):
    each group's shared-table parameters are proven like any lowering. When there is none
    the groups keep their own (lowering then keeps the site on the host) and the note says
    whether that is proven (a minimal set of groups) or the search's budget ran out."""
    epi = [(i, x) for i, x in enumerate(verdicts) if x[0].kind == "epilogue" and x[2]]
    groups = [next(g for g in site.post if cols[0] in g.columns) for _, (_, _, cols, _) in epi]
    tables = {g.post.lut.table if g.post.lut is not None else None for g in groups}
    if len(tables) <= 1 or None in tables or len(outcomes) != len(epi):
        return verdicts, outcomes
    space = space_for(caps, order, groups[0].post.requant.out_type)
    if space is None or any(
        space_for(caps, order, g.post.requant.out_type) != space for g in groups
    ):
        return verdicts, outcomes
    specs = [(g.before, "acc", *x[0].ranges["acc"]) for g, (_, x) in zip(groups, epi, strict=True)]
    rounded = tuple(
        g.post.lut.table for g, o in zip(groups, outcomes, strict=True) if o.kind == "rounded"
    )
    try:
        sh = synthesize_shared(specs, space, tables=tuple(dict.fromkeys(rounded)))
    except KernelError as e:
        sh = None
        note = f"no shared table: {e}"
    if sh is not None and sh.status != "found":
        note = _shared_note(sh, groups)
    if sh is None or sh.params is None:
        site.details.append({"shared_table": note})
        return verdicts, outcomes
    new_verdicts, new_outcomes, new_groups = list(verdicts), [], []
    for (i, (ob, _, cols, lift)), g, p, o in zip(epi, groups, sh.params, outcomes, strict=True):
        if o.kind == "rounded" and g.post.lut.table == p.table:
            new_outcomes.append(o)
            new_groups.append(None)
            continue
        new = dataclasses.replace(g, post=synthesised_post(p, g.post), **_no_offset(g))
        ob2, v2 = _prove(ob, new, check_fn, ctx)
        if isinstance(v2, Exception) or v2.status != Status.PROVEN:
            site.details.append({"shared_table": f"shared-table parameters not proven: {v2}"})
            return verdicts, outcomes
        new_verdicts[i] = (ob2, v2, cols, lift)
        msg = (f"synthesised multiplier={p.multiplier} shift={p.shift} zp={p.zp}, table shared "
               f"by the site's {len(groups)} groups; proven")  # fmt: skip
        new_outcomes.append(Outcome(cols, "synthesised", msg))
        new_groups.append(new)
    for g, new in zip(groups, new_groups, strict=True):
        if new is not None:
            site.post[site.post.index(g)] = new
    site.unrelied += [verdicts[i][0].hash for (i, _), new in zip(epi, new_groups, strict=True)
                        if new is not None]  # fmt: skip
    return new_verdicts, new_outcomes


def _shared_note(sh, groups) -> str:
    """Why the site's groups share no table: proven (a minimal set of groups, each
    readable alone, with no common table) or the exhaustive search's budget ran out."""
    full = sh.complete
    if sh.status == "impossible" and full is not None and full.minimal:
        cols = " and ".join(",".join(map(str, groups[i].columns)) for i in full.minimal)
        n = " x ".join(str(full.options[i]) for i in full.minimal)
        return (f"no table is shared by the groups of columns {cols}: each has parameters alone "
                f"but none of their {n} valid choices agree on one table (exhaustive search, "
                f"{full.time_ms / 1000:.1f} s)")  # fmt: skip
    why = full.note if full is not None else "not searched"
    return (f"the {len(groups)} groups need different tables and none of {sh.candidates_tried} "
            f"candidate tables fits them all; the exhaustive table search stopped ({why}): not "
            "a proof that none exists")  # fmt: skip


def _no_offset(grp) -> dict[str, int]:
    if any(f.name == "acc_offset" for f in dataclasses.fields(grp)):
        return {"acc_offset": 0}  # the synthesised epilogue reads the accumulator itself
    return {}


def summary(site) -> str:
    """'k of n column groups synthesised ...' for a site's report line ('' if none)."""
    for d in site.details:
        if "requant" in d:
            kinds = [o["kind"] for o in d["requant"]]
            parts = [f"{kinds.count(k)} {k}" for k in ("rounded", "synthesised", "impossible",
                                                        "refuted") if kinds.count(k)]  # fmt: skip
            shared = [x["shared_table"] for x in site.details if "shared_table" in x]
            more = f"; {shared[0]}" if shared else ""
            return f"requantization of {len(kinds)} column groups: " + ", ".join(parts) + more
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
