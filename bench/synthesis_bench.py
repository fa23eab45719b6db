"""Fixed-point requantization on an NPU: rounded parameters vs synthesised ones (issue 16).

One command, one table:

    python3 bench/synthesis_bench.py            # the 8 QOperator digits models + 100 random sites
    python3 bench/synthesis_bench.py --random 0 # digits only

For every Sigmoid site of the QOperator digits models (`examples/digits/*_qop_*.onnx`:
MatMul+QLinearAdd and QGemm, int8 and uint8, per tensor and per channel), and for random
sites, each column group (columns with the same reference epilogue and a connected
accumulator range, as the compiler's gate groups them) is lowered to a gemmlowp
double-rounding postprocessor two ways, and `prover.api.check` decides bitwise equality
with the reference (ONNX Runtime's float requantization, QLinearAdd and QLinearSigmoid,
profile `onnx`):

- rounded: `quantize_multiplier(scale)` with the reference zero point and the reference's
  own (ORT-exact) table after it: the best a rounding compiler can do;
- synthesised: `prover.synthesis.synthesize` (multiplier, shift, zero point, table free on
  `npu_fixed`'s parameter space: double rounding); its proposal is then proven by `check`
  (a refutation of a proposal would be a bug, and stops the run);
- single: the same synthesis for a postprocessor with TFLite single rounding instead
  (what the double-rounding hardware loses), also proven by `check`.

Reported: fraction of column groups and of sites equal bitwise each way, the groups for
which synthesis proves no parameters exist, synthesis time per column group, and the sites
that fuse: every group synthesised AND one table shared by all of them (the postprocessor
holds one table per MatMul; `prover.shared_table.synthesize_shared`, each shared-table
proposal proven by `check` too), and the sites for which the exhaustive shared-table search
proves that no such table exists (`1n`).
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from compiler.proving.prove import components
from prover.api import check
from prover.inttypes import int_type
from prover.lut import build_ort_sigmoid_table
from prover.matmul import accumulator_range
from prover.obligation import Obligation
from prover.qgemm import QGemmParams, output_scales
from prover.qlinear_binary import BinaryOp, QLinearBinaryParams, qlinear_binary_table, span_mode
from prover.requant import onnx_requant_scale, quantize_multiplier
from prover.shared_table import synthesize_shared
from prover.synthesis import FixedPointSpace, obligation, synthesize
from prover.terms import Op, Term, Var, op, term_hash

HERE = os.path.dirname(os.path.abspath(__file__))
DIGITS = os.path.join(HERE, "..", "examples", "digits")
ACC = Var("acc")
SPACE = FixedPointSpace(schemes=("fixed_double",), index_order="twos_complement")  # npu_fixed
SINGLE = FixedPointSpace(schemes=("fixed_single",), index_order="twos_complement")


@dataclass
class Group:
    site: str
    columns: tuple[int, ...]
    before: Term
    lo: int
    hi: int


def _rq(acc: Term, scale: float, zp: int, ty: str) -> Term:
    return op("requant_float", acc, scale=float(np.float32(scale)), zp=int(zp), out=ty)


def _lut(x: Term, table, ty: str) -> Term:
    return op("lut", x, table=tuple(int(v) for v in table), in_type=ty, index_order="offset")


def _groups(site: str, befores: list[Term], lo, hi) -> list[Group]:
    by: dict[str, list[int]] = {}
    terms: dict[str, Term] = {}
    for j, b in enumerate(befores):
        h = term_hash(b)
        terms[h] = b
        by.setdefault(h, []).append(j)
    return [
        Group(site, cols, terms[h], a, b)
        for h, js in by.items()
        for cols, a, b in components(js, lo, hi)
    ]


def digits_groups(path: str) -> list[Group]:
    """The column groups of every QLinearSigmoid site of a QOperator digits model."""
    m = onnx.load(path)
    init = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    prod = {o: n for n in m.graph.node for o in n.output}
    name = os.path.basename(path)[:-5]
    out: list[Group] = []
    for n in m.graph.node:
        if n.op_type != "QLinearSigmoid":
            continue
        x, xs, xz, ys, yz = n.input
        ty = "uint8" if init[xz].dtype == np.uint8 else "int8"
        sig = build_ort_sigmoid_table(
            float(init[xs]), int(init[xz]), ty, float(init[ys]), int(init[yz]), ty, fused=True
        )
        p = prod[x]
        if p.op_type == "QGemm":
            a, a_s, a_z, w, w_s, w_z, c, y_s, y_z = p.input
            qp = QGemmParams(
                a_type=ty, b_type="int8", a_scale=float(init[a_s]), a_zp=int(init[a_z]),
                b_scale=tuple(float(v) for v in np.atleast_1d(init[w_s])),
                b_zp=tuple(int(v) for v in np.atleast_1d(init[w_z])),
                y_scale=float(init[y_s]), y_zp=int(init[y_z]),
            )  # fmt: skip
            scales = np.broadcast_to(output_scales(qp), (init[w].shape[1],))
            r = accumulator_range(init[w], np.atleast_1d(init[w_z]), int_type(ty),
                                  int(init[a_z]), init[c])  # fmt: skip
            befores = [_lut(_rq(ACC, s, qp.y_zp, ty), sig, ty) for s in scales]
        else:  # QLinearMatMul -> QLinearAdd (bias) -> QLinearSigmoid
            add = p
            mm = prod[add.input[0]]
            a, a_s, a_z, w, w_s, w_z, y_s, y_z = mm.input
            n_cols = init[w].shape[1]
            w_scales = np.broadcast_to(np.atleast_1d(init[w_s]), (n_cols,))
            scales = [onnx_requant_scale(init[a_s], s, init[y_s]) for s in w_scales]
            r = accumulator_range(init[w], np.atleast_1d(init[w_z]), int_type(ty), int(init[a_z]))
            _, as_, az, b, bs, bz, cs, cz = add.input
            bp = QLinearBinaryParams(
                a_scale=float(init[as_]), a_zp=int(init[az]), b_scale=float(init[bs]),
                b_zp=int(init[bz]), c_scale=float(init[cs]), c_zp=int(init[cz]), dtype=ty,
            )  # fmt: skip
            const = init[b].reshape(-1)
            mode = span_mode((360, n_cols), init[b].shape)
            befores = []
            for j in range(n_cols):
                t_add = qlinear_binary_table(
                    BinaryOp.ADD, int(const[j]), bp, x_is_a=True, mode=mode, fma=True
                )
                befores.append(_lut(_lut(_rq(ACC, scales[j], init[y_z], ty), t_add, ty), sig, ty))
        out += _groups(f"{name}:{n.output[0]}", befores, r.lo, r.hi)
    return out


def random_groups(n: int, seed: int) -> list[Group]:
    """Random int8 Sigmoid sites: one seeded weights column each, random scales."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = int(rng.choice([64, 256, 1024]))
        w = rng.integers(-127, 128, size=(k, 1))
        r = accumulator_range(w, 0, int_type("int8"), 0)
        # a requantization scale that maps about 2-6 standard deviations onto int8
        span = (r.hi[0] - r.lo[0]) / float(rng.uniform(8.0, 40.0))
        scale = float(np.float32(128.0 / span))
        zp = int(rng.integers(-10, 11))
        in_scale = float(rng.uniform(0.02, 0.1))
        sig = build_ort_sigmoid_table(in_scale, zp, "int8", 1 / 256, -128, "int8", fused=True)
        before = _lut(_rq(ACC, scale, zp, "int8"), sig, "int8")
        out.append(Group(f"random:{i}", (0,), before, r.lo[0], r.hi[0]))
    return out


def rounded_after(before: Term) -> Term:
    """`before` with its float requantization replaced by the rounded fixed-point one."""
    if isinstance(before, Op) and before.prim == "requant_float":
        p = before.kwargs
        m, s = quantize_multiplier(float(p["scale"]))
        return op("requant_double", *before.args, multiplier=m, shift=s, zp=p["zp"], out=p["out"])
    if isinstance(before, Op):
        return Op(before.prim, tuple(rounded_after(a) for a in before.args), before.params)
    return before


@dataclass
class Row:
    group: Group
    rounded: str
    synth: str
    single: str
    synth_ms: float
    note: str


def _synth(g: Group, space: FixedPointSpace) -> tuple[str, float, str]:
    s = synthesize(g.before, "acc", g.lo, g.hi, space)
    if s.status != "found":
        return "impossible", s.time_ms, s.conflict.message()
    v = check(obligation(g.before, "acc", g.lo, g.hi, s.params))
    if v.status != "proven":
        sys.exit(f"BUG: synthesised parameters {s.params.to_json()} for {g.site} {v.status}")
    p = s.params
    return "proven", s.time_ms, f"M={p.multiplier} shift={p.shift} zp={p.zp}"


def run_group(g: Group) -> Row:
    ob = Obligation("epilogue", g.before, rounded_after(g.before), {"acc": (g.lo, g.hi)})
    rounded = check(ob).status
    synth, ms, note = _synth(g, SPACE)
    single, _, _ = _synth(g, SINGLE)
    return Row(g, rounded, synth, single, ms, note)


def shared_status(rows: list[Row]) -> str:
    """Whether a site's groups, all synthesised, also share one table (proven by check):
    "fused", "none" (the exhaustive search proves no table exists), "open" (budget ran
    out) or "-" (some group is not synthesised). Records the search time in SHARED_MS."""
    if not all(r.synth == "proven" for r in rows):
        return "-"
    specs = [(r.group.before, "acc", r.group.lo, r.group.hi) for r in rows]
    sh = synthesize_shared(specs, SPACE)
    SHARED_MS.append(sh.time_ms)
    if sh.params is None:
        return "none" if sh.status == "impossible" else "open"
    for (b, _, lo, hi), p in zip(specs, sh.params, strict=True):
        if check(obligation(b, "acc", lo, hi, p)).status != "proven":
            sys.exit(f"BUG: shared-table parameters {p.to_json()} not proven")
    return "fused" if len({p.table for p in sh.params}) == 1 else "open"


SHARED_MS: list[float] = []


def _summary(label: str, rows: list[Row], shared: list[str]) -> str:
    n = len(rows)
    r_ok = sum(r.rounded == "proven" for r in rows)
    s_ok = sum(r.synth == "proven" for r in rows)
    s1_ok = sum(r.single == "proven" for r in rows)
    imp = sum(r.synth == "impossible" for r in rows)
    sites: dict[str, list[Row]] = {}
    for r in rows:
        sites.setdefault(r.group.site, []).append(r)
    sr = sum(all(x.rounded == "proven" for x in v) for v in sites.values())
    ss = sum(all(x.synth == "proven" for x in v) for v in sites.values())
    s1 = sum(all(x.single == "proven" for x in v) for v in sites.values())
    t = [r.synth_ms for r in rows]
    ratio = f"{s_ok / r_ok:.1f}x" if r_ok else ("inf" if s_ok else "-")
    fused, none = shared.count("fused"), shared.count("none")
    return (
        f"{label:<30} {n:>6} {r_ok / n:>8.1%} {s_ok / n:>8.1%} {ratio:>7} {imp:>5} "
        f"{s1_ok / n:>7.1%}  {len(sites):>3}: {sr:>2} {ss:>2} {fused:>2} {none:>2} {s1:>2}  "
        f"{statistics.median(t):6.0f} {max(t):6.0f}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--random", type=int, default=100, help="random sites (default 100)")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--models", default=os.path.join(DIGITS, "digits_*_qop_*.onnx"))
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per column group")
    args = ap.parse_args(argv)
    suites: list[tuple[str, list[Group]]] = [
        (os.path.basename(p)[:-5], digits_groups(p)) for p in sorted(glob.glob(args.models))
    ]
    if args.random:
        suites.append(
            (f"random ({args.random}, seed {args.seed})", random_groups(args.random, args.seed))
        )
    head = (
        f"{'suite':<30} {'groups':>6} {'rounded':>8} {'synth':>8} {'ratio':>7} {'none':>5} "
        f"{'single':>7}  sites: r  s 1t 1n s1  {'ms med':>6} {'max':>6}"
    )
    print(head)
    print("-" * len(head))
    everything: list[Row] = []
    digits: list[Row] = []
    shared: dict[str, list[str]] = {"digits": [], "all": []}
    for label, groups in suites:
        rows = [run_group(g) for g in groups]
        if args.verbose:
            for r in rows:
                g = r.group
                print(f"  {g.site} cols {g.columns[0]}..{g.columns[-1]} [{g.lo}, {g.hi}] "
                      f"rounded {r.rounded}, synthesis {r.synth} ({r.note})")  # fmt: skip
        by_site: dict[str, list[Row]] = {}
        for r in rows:
            by_site.setdefault(r.group.site, []).append(r)
        st = [shared_status(v) for v in by_site.values()]
        print(_summary(label, rows, st), flush=True)
        everything += rows
        shared["all"] += st
        if not label.startswith("random"):
            digits += rows
            shared["digits"] += st
    print("-" * len(head))
    if digits:
        print(_summary("all digits models", digits, shared["digits"]))
    print(_summary("all", everything, shared["all"]))
    if SHARED_MS:
        print(f"shared-table search (sites with every group synthesised): {len(SHARED_MS)} "
              f"sites, median {statistics.median(SHARED_MS):.0f} ms, max {max(SHARED_MS):.0f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
