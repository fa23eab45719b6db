"""Seeded semantic bugs (and equivalent non-bugs) in fused MatMul postprocessing.

Each `Mutant` is one proof obligation: `before` is the correct semantics (kernel
terms: ONNX Runtime's float requantization and QLinearSigmoid table, or the
gemmlowp fixed-point reference), `after` is what a buggy (or a harmlessly
different) compiler or postprocessor computes. Ranges are exact accumulator
ranges of seeded random weight columns (`prover.matmul.accumulator_range`), and
every epilogue mutant carries a `LiftSpec`, so a counterexample lifts to an
input row. `expect` is the catalogue's claim ("bug" changes some output in the
range; "equivalent" changes none); the harness checks it by exhaustive
enumeration, independently of the prover.

Where the hardware descriptor can express the mistake, `after` is a mutated
`npu_backend.postprocess.PostProcess` (its `epilogue_term`); otherwise (a wrapped
multiplier, a shift without rounding, a stored low byte) the mistake is written
out with kernel primitives.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from npu_backend.postprocess import LutParams, PostProcess, RequantParams
from prover.inttypes import INT8
from prover.lut import LutSpec, build_lut, build_ort_sigmoid_table, reorder_table
from prover.matmul import accumulator_range
from prover.obligation import LiftSpec, Obligation
from prover.policy import Policy
from prover.requant import onnx_requant_scale, quantize_multiplier, quantize_multiplier_unfixed
from prover.terms import Term, Var, op

ACC = Var("acc")
BUG, EQUIVALENT = "bug", "equivalent"

# --- the scenario: one seeded weights column of a QLinearMatMul ---------------------------

K = 64
SEED = 20261130
A_SCALE, W_SCALE, Y_SCALE, Y_ZP = 0.02, 0.01, 0.35, 3
OUT_SCALE, OUT_ZP = 1 / 256, -128
BIAS = 1234
CLIP_LO, CLIP_HI = -10, 12  # where the sigmoid table is not flat, so a skipped clip shows
CLIP = (CLIP_LO, CLIP_HI)


@dataclass(frozen=True)
class Column:
    """One weights column, its exact accumulator range and its LiftSpec."""

    weights: tuple[int, ...]
    lo: int
    hi: int
    lift: LiftSpec


@cache
def columns(n: int = 4) -> tuple[Column, ...]:
    """`n` seeded int8 weight columns (each contains a +1 so every accumulator is reachable)."""
    rng = np.random.default_rng(SEED)
    w = rng.integers(-127, 128, size=(K, n)).astype(np.int64)
    w[0, :] = 1
    r = accumulator_range(w, 0, INT8, 0, np.full(n, BIAS))
    return tuple(
        Column(
            tuple(int(v) for v in w[:, j]),
            r.lo[j],
            r.hi[j],
            LiftSpec("acc", tuple(int(v) for v in w[:, j]), 0, 0, "int8", BIAS),
        )
        for j in range(n)
    )


def w_scale(j: int) -> float:
    """Per-channel weight scale of column j."""
    return W_SCALE * (1 + j / 4)


def float_scale(j: int = 0) -> float:
    """ONNX Runtime's float32 requantization scale of column j."""
    return float(onnx_requant_scale(A_SCALE, w_scale(j), Y_SCALE))


def fixed(j: int = 0) -> tuple[int, int]:
    """The correct (multiplier, shift) of column j's scale."""
    return quantize_multiplier(float_scale(j))


# --- tables ------------------------------------------------------------------------------


@cache
def ort_table(order: str = "twos_complement") -> tuple[int, ...]:
    """ONNX Runtime's QLinearSigmoid table for (Y_SCALE, Y_ZP) -> (1/256, -128)."""
    t = build_ort_sigmoid_table(Y_SCALE, Y_ZP, "int8", OUT_SCALE, OUT_ZP, "int8", index_order=order)
    return tuple(int(v) for v in t)


def spec(**kw) -> LutSpec:
    base = dict(
        function="sigmoid",
        in_scale=Y_SCALE,
        in_zp=Y_ZP,
        in_type="int8",
        out_scale=OUT_SCALE,
        out_zp=OUT_ZP,
        out_type="int8",
    )
    base.update(kw)
    return LutSpec(**base)


def table(**kw) -> tuple[int, ...]:
    return tuple(int(v) for v in build_lut(spec(**kw)))


# Tie-heavy table: identity at half-integer steps (every odd input is a rounding tie),
# the way a compiler tabulates LeakyRelu/HardSwish-like piecewise-linear activations.
TIE = dict(function="identity", in_scale=0.5, in_zp=Y_ZP, out_scale=1.0, out_zp=0)


@cache
def precision_scales() -> tuple[float, float]:
    """(scale whose sigmoid table changes between float32 and float64, one where none does)."""
    differ = same = None
    for i in range(5000):
        s = 0.02 + i * 0.0000371
        a = build_lut(spec(in_scale=s, precision="float32"))
        b = build_lut(spec(in_scale=s, precision="float64"))
        if differ is None and np.any(a != b):
            differ = s
        if same is None and np.array_equal(a, b):
            same = s
        if differ is not None and same is not None:
            return differ, same
    raise RuntimeError("no float32/float64 table pair found")


@cache
def mlas_scale() -> float:
    """An input scale where a plain float32 sigmoid table differs from ONNX Runtime's."""
    for i in range(2000):
        s = 0.01 + i * 0.000731
        ort = build_ort_sigmoid_table(s, Y_ZP, "int8", OUT_SCALE, OUT_ZP, "int8")
        if np.any(ort != build_lut(spec(in_scale=s))):
            return s
    raise RuntimeError("no scale found where the MLAS table differs")


# --- term helpers ------------------------------------------------------------------------


def lut(x: Term, t, order: str = "offset") -> Term:
    return op("lut", x, table=tuple(int(v) for v in t), in_type="int8", index_order=order)


def rq_float(x: Term, scale: float, zp: int = Y_ZP, out: str = "int8") -> Term:
    return RequantParams("float32", zp, out, scale=float(np.float32(scale))).term(x)


def rq_for(y_scale: float) -> Term:
    """ONNX requantization of column 0 when the MatMul's output scale is `y_scale`."""
    return rq_float(ACC, float(onnx_requant_scale(A_SCALE, W_SCALE, y_scale)))


def rq_double(x: Term, m: int, s: int, zp: int = Y_ZP, out: str = "int8") -> Term:
    return RequantParams("fixed_double", zp, out, multiplier=m, shift=s).term(x)


def rq_single(x: Term, m: int, s: int, zp: int = Y_ZP, out: str = "int8") -> Term:
    return RequantParams("fixed_single", zp, out, multiplier=m, shift=s).term(x)


def post(requant: RequantParams, t=None, order="offset", clip=None) -> Term:
    """The epilogue term of a `PostProcess` descriptor (the hardware's meaning)."""
    lp = None if t is None else LutParams(tuple(int(v) for v in t), "int8", "int8", order)
    pp = PostProcess(requant, clip=clip, function=None if lp is None else "sigmoid", lut=lp)
    return pp.epilogue_term(ACC)


def float_rq(j: int = 0, zp: int = Y_ZP) -> RequantParams:
    return RequantParams("float32", zp, "int8", scale=float_scale(j))


def double_rq(j: int = 0, zp: int = Y_ZP, dm: int = 0, ds: int = 0) -> RequantParams:
    m, s = fixed(j)
    return RequantParams("fixed_double", zp, "int8", multiplier=m + dm, shift=s + ds)


def rdbpot(x: Term, e: int) -> Term:
    """x / 2^e rounded half away from zero, from add/clip/floordiv/mod only (gemmlowp's RDBPOT)."""
    rem = op("mod_const", x, c=1 << e)
    neg = op("clip", op("mul_const", x, c=-1), lo=0, hi=1)  # [x < 0]
    thr = op("add_const", neg, c=((1 << e) - 1) >> 1)
    up = op("clip", op("sub", rem, thr), lo=0, hi=1)  # [rem > thr]
    return op("add", op("floordiv_const", x, c=1 << e), up)


def sat8(x: Term) -> Term:
    return op("saturate", x, type="int8")


# --- mutants -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutant:
    """One seeded mistake as an obligation (`before` correct, `after` mutated)."""

    name: str
    category: str
    mistake: str
    expect: str
    before: object
    after: object
    ranges: dict
    lift: LiftSpec | None = None
    kind: str = "epilogue"
    notes: dict = field(default_factory=dict)

    def obligation(self, policy: str = "bitwise") -> Obligation:
        return Obligation(
            self.kind,
            self.before,
            self.after,
            self.ranges,
            Policy.parse(policy),
            self.lift,
            note=f"mutant {self.name}",
        )


def _epi(name, cat, mistake, expect, before, after, col: int = 0, **notes) -> Mutant:
    c = columns()[col]
    return Mutant(
        name, cat, mistake, expect, before, after, {"acc": (c.lo, c.hi)}, c.lift, notes=notes
    )


DYADIC_M, DYADIC_S = quantize_multiplier(3 / 4096)  # (3 * 2^29, -10): exact, ties occur


def _requant_mutants() -> list[Mutant]:
    m, s = fixed()
    ref = post(double_rq())  # MatMulInteger + Requantize (gemmlowp double rounding), fused
    rref = rq_double(ACC, m, s, zp=0, out="int32")  # MBQM(acc) before + zp and saturation
    k = 31 - s
    prod = op("mul_const", ACC, c=m)
    out = [
        _epi(
            "rq_single_rounding",
            "requant",
            "single rounding (TFLite) instead of double (gemmlowp)",
            BUG,
            ref,
            post(RequantParams("fixed_single", Y_ZP, "int8", multiplier=m, shift=s)),
        ),
        _epi(
            "rq_float_vs_fixed",
            "requant",
            "ONNX float32 scale lowered to fixed-point double rounding without proof",
            BUG,
            post(float_rq()),
            ref,
        ),
        _epi(
            "rq_no_rounding",
            "requant",
            "arithmetic shift without the rounding nudge (floor)",
            BUG,
            ref,
            sat8(op("add_const", op("floordiv_const", prod, c=1 << k), c=Y_ZP)),
        ),
        _epi(
            "rq_half_up_ties",
            "requant",
            "ties rounded half up (+2^(k-1) then shift) instead of half away from zero",
            BUG,
            ref,
            sat8(
                op(
                    "add_const",
                    op("floordiv_const", op("add_const", prod, c=1 << (k - 1)), c=1 << k),
                    c=Y_ZP,
                )
            ),
        ),
        _epi(
            "rq_no_saturation",
            "saturation",
            "no saturation: the low byte is stored (wrap)",
            BUG,
            ref,
            op("wrap", op("add_const", rref, c=Y_ZP), type="int8"),
        ),
        _epi(
            "rq_sat_symmetric",
            "saturation",
            "saturation to [-127, 127] instead of the int8 range",
            BUG,
            ref,
            op("clip", ref, lo=-127, hi=127),
        ),
        _epi(
            "rq_sat_uint8",
            "saturation",
            "saturation to the uint8 range [0, 255], then stored as int8",
            BUG,
            ref,
            op("wrap", op("saturate", op("add_const", rref, c=Y_ZP), type="uint8"), type="int8"),
        ),
        _epi(
            "rq_zp_after_sat",
            "zero point",
            "zero point added after saturation (then clamped again)",
            BUG,
            ref,
            sat8(op("add_const", rq_double(ACC, m, s, zp=0), c=Y_ZP)),
        ),
        _epi("rq_shift_plus1", "shift", "shift off by one (+1)", BUG, ref, post(double_rq(ds=1))),
        _epi("rq_shift_minus1", "shift", "shift off by one (-1)", BUG, ref, post(double_rq(ds=-1))),
        _epi(
            "rq_multiplier_minus1",
            "multiplier",
            "multiplier off by one (M-1) for the dyadic scale 3/4096 (exact ties now round down)",
            BUG,
            rq_double(ACC, DYADIC_M, DYADIC_S),
            rq_double(ACC, DYADIC_M - 1, DYADIC_S),
        ),
        _epi(
            "rq_dropped",
            "requant",
            "the requantize is dropped (accumulator saturated straight to int8)",
            BUG,
            ref,
            sat8(op("add_const", ACC, c=Y_ZP)),
        ),
        _epi(
            "rq_zp_off_by_one",
            "zero point",
            "output zero point off by one",
            BUG,
            ref,
            post(double_rq(zp=Y_ZP + 1)),
        ),
        _epi(
            "rq_zp_negated",
            "zero point",
            "output zero point with the wrong sign",
            BUG,
            ref,
            post(double_rq(zp=-Y_ZP)),
        ),
        _epi(
            "rq_per_channel_column",
            "per-channel",
            "per-channel multiplier of the next column used",
            BUG,
            post(double_rq(1)),
            post(double_rq(2)),
            col=1,
        ),
        _epi(
            "rq_per_channel_float_column",
            "per-channel",
            "per-channel float scale of the previous column used",
            BUG,
            post(float_rq(2)),
            post(float_rq(1)),
            col=2,
        ),
        _epi(
            "rq_clip_on_acc",
            "clip",
            "the int8 clip applied to the accumulator instead of after requantization",
            BUG,
            post(double_rq(), clip=(-20, 90)),
            rq_double(op("clip", ACC, lo=-20, hi=90), m, s),
        ),
    ]
    out += _multiplier_2_31()
    return out


def _multiplier_2_31() -> list[Mutant]:
    """The quantiser's 2^31 case: real scale whose mantissa rounds up to 2^31."""
    real = math.ldexp(1 - 2.0**-33, -10)
    mu, su = quantize_multiplier_unfixed(real)
    mf, sf = quantize_multiplier(real)
    assert mu == 1 << 31 and (mf, sf) == (1 << 30, su + 1)
    ref = rq_double(ACC, mf, sf)
    # int32 hardware register holding 2^31 wraps to -2^31; SRDHM(x, -2^31) == -x exactly
    # (x != INT32_MIN), so the unit computes RDBPOT(-x, -shift).
    wrapped = sat8(op("add_const", rdbpot(op("mul_const", ACC, c=-1), -su), c=Y_ZP))
    return [
        _epi(
            "rq_2p31_wrapped",
            "2^31",
            "quantize_multiplier_unfixed: M=2^31 wraps to -2^31 in the int32 register",
            BUG,
            ref,
            wrapped,
            real=real,
        ),
        _epi(
            "rq_2p31_saturated",
            "2^31",
            "quantize_multiplier_unfixed: M=2^31 saturated to 2^31-1 (shift not incremented)",
            BUG,
            ref,
            rq_double(ACC, (1 << 31) - 1, su),
            real=real,
        ),
    ]


def _lut_mutants() -> list[Mutant]:
    ort = ort_table("twos_complement")
    ref = post(float_rq(), ort, "twos_complement")  # QLinearMatMul + QLinearSigmoid, fused
    ort_off = reorder_table(ort, INT8, "twos_complement", "offset")
    rq = rq_float(ACC, float_scale())
    rq_tie = rq_for(TIE["in_scale"])
    tie_ref = lut(rq_tie, table(**TIE))
    d_scale, _ = precision_scales()
    ms = mlas_scale()
    rq_ms = rq_for(ms)
    rq_d = rq_for(d_scale)
    return [
        _epi(
            "lut_index_order_swapped",
            "LUT index",
            "twos_complement table indexed with the offset rule (x+128)",
            BUG,
            ref,
            post(float_rq(), ort, "offset"),
        ),
        _epi(
            "lut_index_order_swapped_rev",
            "LUT index",
            "offset table indexed with the twos_complement rule (x & 0xFF)",
            BUG,
            ref,
            post(float_rq(), ort_off, "twos_complement"),
        ),
        _epi(
            "lut_index_off_by_one",
            "LUT index",
            "table index off by one (reads entry index+1)",
            BUG,
            ref,
            post(float_rq(), np.roll(ort_off, -1), "offset"),
        ),
        _epi(
            "lut_unsigned_entries",
            "LUT",
            "table entries stored as uint8 codes and read back unsigned",
            BUG,
            ref,
            op("saturate", lut(rq, np.asarray(ort_off) & 0xFF), type="uint8"),
        ),
        _epi(
            "lut_plain_sigmoid",
            "LUT build",
            "table from a float32 sigmoid instead of ONNX Runtime's MLAS logistic",
            BUG,
            lut(rq_ms, build_ort_sigmoid_table(ms, Y_ZP, "int8", OUT_SCALE, OUT_ZP, "int8")),
            lut(rq_ms, table(in_scale=ms)),
            in_scale=ms,
        ),
        _epi(
            "lut_float64_changes",
            "LUT build",
            "table built in float64 where float32 is the reference (an entry changes)",
            BUG,
            lut(rq_d, table(in_scale=d_scale)),
            lut(rq_d, table(in_scale=d_scale, precision="float64")),
            in_scale=d_scale,
        ),
        _epi(
            "lut_half_away",
            "LUT rounding",
            "table rounded half away from zero instead of half to even",
            BUG,
            tie_ref,
            lut(rq_tie, table(**TIE, rounding="half_away")),
        ),
        _epi(
            "lut_truncation",
            "LUT rounding",
            "table constants folded by truncation instead of rounding",
            BUG,
            ref,
            lut(rq, table(rounding="toward_zero")),
        ),
        _epi(
            "lut_zp_before_rounding",
            "LUT zero point",
            "LUT zero point added before rounding (round(y/s + zp))",
            BUG,
            lut(rq_tie, table(**{**TIE, "out_zp": 1})),
            lut(rq_tie, table(**{**TIE, "out_zp": 1}, zp_placement="before_rounding")),
        ),
        _epi(
            "lut_input_zp_ignored",
            "LUT build",
            "table built ignoring the input zero point",
            BUG,
            ref,
            lut(rq, table(in_zp=0, function="sigmoid_mlas")),
        ),
        _epi(
            "lut_wrong_function",
            "LUT build",
            "tanh table loaded into a sigmoid slot",
            BUG,
            ref,
            lut(rq, table(function="tanh")),
        ),
        _epi(
            "lut_dropped",
            "activation",
            "the fused activation is dropped (requantized value stored)",
            BUG,
            ref,
            rq,
        ),
    ]


def _activation_mutants() -> list[Mutant]:
    rq = rq_float(ACC, float_scale())
    t1 = reorder_table(ort_table(), INT8, "twos_complement", "offset")
    t2 = build_ort_sigmoid_table(OUT_SCALE, OUT_ZP, "int8", OUT_SCALE, OUT_ZP, "int8")
    both = lut(lut(rq, t1), t2)
    return [
        _epi(
            "act_second_dropped",
            "activation",
            "second of two consecutive activations silently dropped",
            BUG,
            both,
            lut(rq, t1),
        ),
        _epi(
            "act_order_swapped",
            "activation",
            "two activations applied in the wrong order",
            BUG,
            both,
            lut(lut(rq, t2), t1),
        ),
    ]


def _clip_mutants() -> list[Mutant]:
    t = reorder_table(ort_table(), INT8, "twos_complement", "offset")
    ref = post(float_rq(), t, clip=CLIP)
    return [
        _epi(
            "clip_skipped",
            "clip",
            "the clip between requantize and LUT is skipped",
            BUG,
            ref,
            post(float_rq(), t),
        ),
        _epi(
            "clip_lo_off_by_one",
            "clip",
            "clip lower bound off by one",
            BUG,
            ref,
            post(float_rq(), t, clip=(CLIP_LO + 1, CLIP_HI)),
        ),
    ]


def _index_maps() -> list[Mutant]:
    n = 16
    i, j = Var("i"), Var("j")
    flat = op("add", op("mul_const", i, c=n), j)
    back = (op("floordiv_const", flat, c=n), op("mod_const", flat, c=n))
    ranges = {"i": (0, n - 1), "j": (0, n - 1)}
    wrong = op("add", op("mul_const", i, c=n - 1), j)
    wback = (op("floordiv_const", wrong, c=n - 1), op("mod_const", wrong, c=n - 1))

    def im(name, mistake, expect, after):
        return Mutant(name, "index map", mistake, expect, (i, j), after, ranges, None, "index_map")

    return [
        im(
            "index_transposed",
            "output written through a hidden transpose (i, j) -> (j, i)",
            BUG,
            back[::-1],
        ),
        im(
            "index_stride_off_by_one",
            "flattened with row stride n-1 (padding forgotten)",
            BUG,
            wback,
        ),
        im(
            "index_flatten_roundtrip",
            "EQUIV: flatten to [M*N] and back (a unit-dim reshape)",
            EQUIVALENT,
            back,
        ),
    ]


# --- equivalent variants -----------------------------------------------------------------


@cache
def equivalent_multiplier() -> tuple[int, int]:
    """A different (M, s) with fewer significant bits, equal to the reference on column 0."""
    from prover.domain import NUMPY
    from prover.terms import evaluate

    m, s = fixed()
    c = columns()[0]
    xs = np.arange(c.lo, c.hi + 1, dtype=np.int64)
    ref = evaluate(rq_double(ACC, m, s), NUMPY, {"acc": xs})
    for bits in range(8, 31):
        drop = 31 - bits
        m2 = ((m >> drop) + 1) << drop if (m >> (drop - 1)) & 1 else (m >> drop) << drop
        if (
            m2 != m
            and m2 < 1 << 31
            and np.array_equal(evaluate(rq_double(ACC, m2, s), NUMPY, {"acc": xs}), ref)
        ):
            return m2, s
    raise RuntimeError("no equivalent shorter multiplier")


def _equivalents() -> list[Mutant]:
    ort = ort_table("twos_complement")
    ort_off = reorder_table(ort, INT8, "twos_complement", "offset")
    ref = post(float_rq(), ort, "twos_complement")
    rq = rq_float(ACC, float_scale())
    m, s = fixed()
    dref = post(double_rq())
    _, same = precision_scales()
    m2, s2 = equivalent_multiplier()
    k = 31 - s
    t1 = ort_off
    t2 = build_ort_sigmoid_table(OUT_SCALE, OUT_ZP, "int8", OUT_SCALE, OUT_ZP, "int8")
    composed = np.asarray(t2)[np.asarray(t1) + 128]
    clip_tab = ort_off[np.clip(np.arange(-128, 128), CLIP_LO, CLIP_HI) + 128]
    c = columns()[0]
    narrow = Mutant(
        "eq_no_saturation_narrow",
        "equivalent",
        "EQUIV: saturation dropped where this column's accumulator never saturates",
        EQUIVALENT,
        rq_double(ACC, m, s),
        op("wrap", rq_double(ACC, m, s, out="int32"), type="int8"),
        {"acc": (c.lo // 4, c.hi // 4)},
        c.lift,
    )
    return [
        _epi(
            "eq_table_other_order",
            "equivalent",
            "EQUIV: table stored in offset order with the offset index rule",
            EQUIVALENT,
            ref,
            post(float_rq(), ort_off, "offset"),
        ),
        _epi(
            "eq_clip_wider_than_type",
            "equivalent",
            "EQUIV: clip(-200, 200) on an int8 value",
            EQUIVALENT,
            ref,
            post(float_rq(), ort, "twos_complement", clip=(-200, 200)),
        ),
        _epi(
            "eq_float64_no_change",
            "equivalent",
            "EQUIV: table built in float64 where no entry changes",
            EQUIVALENT,
            lut(rq_for(same), table(in_scale=same)),
            lut(rq_for(same), table(in_scale=same, precision="float64")),
            in_scale=same,
        ),
        _epi(
            "eq_shorter_multiplier",
            "equivalent",
            f"EQUIV: (M, s) = ({m2}, {s2}) instead of ({m}, {s}) over this range",
            EQUIVALENT,
            dref,
            post(RequantParams("fixed_double", Y_ZP, "int8", multiplier=m2, shift=s2)),
        ),
        _epi(
            "eq_multiplier_plus1",
            "equivalent",
            "EQUIV: multiplier off by one (M+1): invisible over this accumulator range",
            EQUIVALENT,
            dref,
            post(double_rq(dm=1)),
        ),
        _epi(
            "eq_zp_in_rounding_constant",
            "equivalent",
            "EQUIV: integer zero point folded into the single-rounding constant",
            EQUIVALENT,
            rq_single(ACC, m, s),
            sat8(
                op(
                    "floordiv_const",
                    op("add_const", op("mul_const", ACC, c=m), c=(1 << (k - 1)) + (Y_ZP << k)),
                    c=1 << k,
                )
            ),
        ),
        _epi(
            "eq_composed_tables",
            "equivalent",
            "EQUIV: two activations composed into one table",
            EQUIVALENT,
            lut(lut(rq, t1), t2),
            lut(rq, composed),
        ),
        _epi(
            "eq_clip_folded_into_table",
            "equivalent",
            "EQUIV: clip folded into the LUT entries",
            EQUIVALENT,
            post(float_rq(), ort_off, clip=CLIP),
            post(float_rq(), clip_tab),
        ),
        _epi(
            "eq_rdbpot_by_parts",
            "equivalent",
            "EQUIV: gemmlowp RDBPOT rebuilt from shift/mask/compare",
            EQUIVALENT,
            rq_double(ACC, 1 << 30, -6),
            sat8(op("add_const", rdbpot(rq_double(ACC, 1 << 30, 0, zp=0, out="int32"), 6), c=Y_ZP)),
        ),
        _epi(
            "eq_half_away_no_ties",
            "equivalent",
            "EQUIV: sigmoid table rounded half away from zero where no entry is a tie",
            EQUIVALENT,
            lut(rq, table()),
            lut(rq, table(rounding="half_away")),
        ),
        narrow,
    ]


BUILDERS: tuple[Callable[[], list[Mutant]], ...] = (
    _requant_mutants,
    _lut_mutants,
    _activation_mutants,
    _clip_mutants,
    _index_maps,
    _equivalents,
)


@cache
def catalog() -> tuple[Mutant, ...]:
    """Every mutant, in a fixed order (names are unique)."""
    out = tuple(m for b in BUILDERS for m in b())
    names = [m.name for m in out]
    assert len(set(names)) == len(names), "duplicate mutant names"
    return out
