"""Concrete (numpy) vs symbolic (Z3) conformance of every kernel primitive.

Each primitive is built once as a Z3 term over free bit-vector variables and
evaluated by substitution + simplification (constant folding, no solver) on at
least 10,000 boundary and random points; the result must equal the numpy
interpretation exactly. Boundary points include rounding half-steps, saturation
edges, INT32_MIN/INT32_MAX, the 2^24 float32 boundary and threshold points +-1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import z3

from prover.inttypes import INT32_MAX, INT32_MIN

F32_EXACT = 1 << 24  # int32 -> float32 is exact below this magnitude


def int32_boundaries() -> np.ndarray:
    """INT32_MIN/MAX, 0, +-1, every +-2^k +- 1 (incl. the 2^24 float32 boundary)."""
    pts = {INT32_MIN, INT32_MIN + 1, INT32_MIN + 2, INT32_MAX, INT32_MAX - 1, 0, 1, -1}
    for k in range(32):
        for d in (-2, -1, 0, 1, 2):
            for sign in (1, -1):
                pts.add(sign * (1 << k) + d)
    for d in range(-3, 4):
        pts.update({F32_EXACT + d, -F32_EXACT + d, 2 * F32_EXACT + d, -2 * F32_EXACT + d})
    return np.array(sorted(p for p in pts if INT32_MIN <= p <= INT32_MAX), dtype=np.int64)


def int32_random(rng: np.random.Generator, n: int, lo: int = INT32_MIN, hi: int = INT32_MAX):
    """A mix of uniform, small and log-uniform magnitudes inside [lo, hi]."""
    k = n // 3
    uni = rng.integers(lo, hi, size=k, endpoint=True)
    small = np.clip(rng.integers(-2000, 2001, size=k), lo, hi)
    mag = np.exp2(rng.uniform(0, 31, size=n - 2 * k)).astype(np.int64)
    logu = np.clip(mag * rng.choice([-1, 1], size=n - 2 * k), lo, hi)
    return np.concatenate([uni, small, logu]).astype(np.int64)


def fill(rng: np.random.Generator, special: Sequence[int], n: int, lo=INT32_MIN, hi=INT32_MAX):
    """`special` points inside [lo, hi] topped up with random ones to at least `n` points."""
    sp = np.asarray([p for p in special if lo <= p <= hi], dtype=np.int64)
    extra = max(0, n - sp.size)
    return np.concatenate([sp, int32_random(rng, extra, lo, hi)])


def neighbours(ts: Sequence[int], radius: int = 1) -> list[int]:
    """Every t - radius .. t + radius (threshold points and their neighbours)."""
    return [int(t) + d for t in ts for d in range(-radius, radius + 1)]


def z3_eval(term: z3.ExprRef, xs: Sequence[z3.ExprRef], points: np.ndarray) -> np.ndarray:
    """Evaluate `term` at each row of `points` (one column per variable in `xs`).

    The term is defined once as an SMT-LIB function and Z3's simplifier folds
    `(f c0 c1 ...)` for every row in one `Z3_eval_smtlib2_string` call: constant
    folding only, no solver, and no per-point Python API overhead (about 4x faster
    than substitute + simplify). Integer terms give int64 values, boolean terms 0/1.
    """
    pts = np.asarray(points, dtype=np.int64)
    if pts.ndim == 1:
        pts = pts[:, None]
    width = xs[0].size()
    is_bool = z3.is_bool(term)
    params = " ".join(f"({v.sexpr()} (_ BitVec {width}))" for v in xs)
    sort = "Bool" if is_bool else f"(_ BitVec {width})"
    mask = (1 << width) - 1
    digits = width // 4
    lines = [f"(define-fun __f ({params}) {sort} {term.sexpr()})"]
    for row in pts.tolist():
        args = " ".join(f"#x{c & mask:0{digits}x}" for c in row)
        lines.append(f"(simplify (__f {args}))")
    ctx = z3.Context()
    out = z3.Z3_eval_smtlib2_string(ctx.ref(), "\n".join(lines)).split()
    if len(out) != pts.shape[0]:
        raise AssertionError(f"Z3 returned {len(out)} values for {pts.shape[0]} points: {out[:3]}")
    if is_bool:
        if not set(out) <= {"true", "false"}:
            raise AssertionError(f"boolean term did not fold to constants: {out[:3]}")
        return np.array([o == "true" for o in out], dtype=np.int64)
    if not all(o.startswith("#x") for o in out):
        raise AssertionError(f"term did not fold to constants: {out[:3]}")
    vals = [int(o[2:], 16) for o in out]
    return np.array([v - (1 << width) if v >> (width - 1) else v for v in vals], dtype=np.int64)


# --- test cases ---------------------------------------------------------------------------

import pytest  # noqa: E402

from prover import lut as L  # noqa: E402
from prover import requant as R  # noqa: E402
from prover.domain import NUMPY, Z3  # noqa: E402
from prover.inttypes import TYPES, int_type, saturate, wrap  # noqa: E402
from prover.primitives import PRIMITIVES  # noqa: E402
from prover.staircase import monotone_thresholds  # noqa: E402
from prover.terms import Var, evaluate, op  # noqa: E402

N = 10_000
# (multiplier, shift) pairs: the DESIGN example, extremes of M and of the shift.
FIXED_SCALES = [
    (1 << 30, -1),
    (1518500250, -5),
    (R.INT32_MAX, 0),
    (1 << 30, 0),
    (1073741824 + 12345, 3),
    (1, -31),
    (R.INT32_MAX, -31),
    (1900000000, -12),
    (1500000000, 2),
    (0, 0),
]


def _check_term(term, nvars: int, points: np.ndarray) -> None:
    """Evaluate `term` in both domains at `points` ([n, nvars]) and compare; also the preconditions."""
    names = [f"x{i}" for i in range(nvars)]
    zvars = [Z3.var(n) for n in names]
    pre_z: list = []
    sym = evaluate(term, Z3, dict(zip(names, zvars, strict=True)), pre_z)
    pts = np.asarray(points, dtype=np.int64).reshape(len(points), nvars)
    env = {n: pts[:, i] for i, n in enumerate(names)}
    pre_n: list = []
    conc = np.broadcast_to(evaluate(term, NUMPY, env, pre_n), (len(pts),))
    ok = np.ones(len(pts), dtype=bool)
    for pz, pn in zip(pre_z, pre_n, strict=True):
        pn = np.broadcast_to(np.asarray(pn, dtype=bool), (len(pts),))
        assert np.array_equal(z3_eval(pz, zvars, pts).astype(bool), pn), "precondition differs"
        ok &= pn
    got = z3_eval(sym, zvars, pts[ok])
    bad = np.nonzero(got != conc[ok])[0]
    assert bad.size == 0, (
        f"{term.prim}: Z3 != numpy at {pts[ok][bad[:5]].tolist()}: "
        f"{got[bad[:5]].tolist()} vs {conc[ok][bad[:5]].tolist()}"
    )
    assert ok.sum() > 0


def _half_steps(multiplier: int, shift: int, rng, n: int) -> list[int]:
    """x near (k + 1/2) * 2^(31-shift) / M: where fixed-point rounding decides."""
    if multiplier == 0:
        return []
    k = rng.integers(-3000, 3000, size=n) + 0.5
    x = np.clip(np.rint(k * 2.0 ** (31 - shift) / multiplier), INT32_MIN, INT32_MAX)
    x = x.astype(np.int64)
    return neighbours(x.tolist())


def _unary_case(rng, term, lo=INT32_MIN, hi=INT32_MAX, special=(), n=N):
    _check_term(term, 1, fill(rng, list(int32_boundaries()) + list(special), n, lo, hi))


def _requant_fixed_cases(prim: str):
    for m, s in FIXED_SCALES:
        for out, zp in (("int8", 3), ("uint8", 128), ("int16", -7)):
            yield prim, m, s, out, zp


def _fixed_points(prim, m, s, out, zp, rng, n):
    t = int_type(out)
    fn = R.requant_double if prim == "requant_double" else R.requant_single
    left = max(s, 0)
    lo, hi = INT32_MIN >> left, INT32_MAX >> left
    ths = monotone_thresholds(lambda a: fn(NUMPY, a, m, s, zp, t), t.min, t.max, lo, hi)
    if ths.size > 300:  # int16 outputs: a sample of the 65,535 thresholds, with both ends
        ths = np.concatenate([ths[:50], ths[-50:], rng.choice(ths, 200, replace=False)])
    special = neighbours(ths.tolist()) + _half_steps(m, s, rng, 100)
    # Points outside the precondition exercise its evaluation too.
    special += [INT32_MIN, INT32_MAX, lo - 1, hi + 1]
    return fill(rng, special, n)


def test_every_primitive_has_a_conformance_case():
    covered = {
        "add", "sub", "add_const", "mul_const", "clip", "saturate", "wrap", "requant_double",
        "requant_single", "requant_float", "lut", "dot", "floordiv_const", "mod_const",
    }  # fmt: skip
    numpy_only = {name for name, p in PRIMITIVES.items() if not p.symbolic}
    missing = set(PRIMITIVES) - covered - numpy_only
    assert not missing, f"add a Z3-vs-numpy conformance case for primitives {sorted(missing)}"
    assert numpy_only == {"qlinear_binary", "npu_eltwise"}  # each has its case below


def test_numpy_only_primitives_decline_every_symbolic_domain():
    """A primitive without a bit-vector form never gives the SMT encoding a value: it
    raises NotApplicable there (its obligations are decided by enumeration; its numpy
    values are checked against ONNX Runtime in tests/test_eltwise_two_inputs.py)."""
    from prover.domain import Z3Domain
    from prover.eltwise import EltwiseParams
    from prover.errors import NotApplicable
    from prover.qlinear_binary import QLinearBinaryParams, SpanMode

    p = QLinearBinaryParams(
        a_scale=0.02, a_zp=1, b_scale=0.03, b_zp=2, c_scale=0.04, c_zp=3, dtype="uint8"
    )
    rec = EltwiseParams.of("QLinearAdd", p, SpanMode.GENERAL, fma=True)
    terms = [
        op("qlinear_binary", Var("a"), Var("b"), binary="QLinearAdd", mode="general",
           fma=True, **vars(p)),
        op("npu_eltwise", Var("a"), Var("b"), **rec.params()),
    ]  # fmt: skip
    d = Z3Domain()
    for t in terms:
        with pytest.raises(NotApplicable):
            evaluate(t, d, {"a": d.var("a"), "b": d.var("b")})
        v = evaluate(t, NUMPY, {"a": np.arange(256), "b": np.arange(256)[::-1]})
        assert v.shape == (256,) and v.min() >= 0 and v.max() <= 255


def test_add_sub(rng):
    b = int32_boundaries()
    pairs = np.stack([rng.choice(b, N), rng.choice(b, N)], axis=1)
    pairs[N // 2 :] = np.stack([int32_random(rng, N - N // 2)] * 2, axis=1)
    pairs[N // 2 :, 1] = rng.permutation(pairs[N // 2 :, 1])
    for name in ("add", "sub"):
        _check_term(op(name, Var("x0"), Var("x1")), 2, pairs)


@pytest.mark.parametrize("c", [0, 1, -1, 12345, INT32_MIN, INT32_MAX])
def test_add_mul_const(rng, c):
    _unary_case(rng, op("add_const", Var("x0"), c=c), n=N // 3)
    _unary_case(rng, op("mul_const", Var("x0"), c=c), n=N // 3)


def test_clip(rng):
    for lo, hi in ((-128, 127), (0, 6), (5, 5), (INT32_MIN, 0)):
        _unary_case(
            rng, op("clip", Var("x0"), lo=lo, hi=hi), special=[lo - 1, lo, hi, hi + 1], n=N // 4
        )


@pytest.mark.parametrize("tname", ["int4", "uint4", "int8", "uint8", "int16", "uint16", "int32"])
def test_saturate(rng, tname):
    t = int_type(tname)
    sp = [t.min - 1, t.min, t.min + 1, t.max - 1, t.max, t.max + 1]
    _unary_case(rng, op("saturate", Var("x0"), type=tname), special=sp, n=N // 5)


@pytest.mark.parametrize(
    "tname", ["int4", "uint4", "int8", "uint8", "int16", "uint16", "int32", "uint32"]
)
def test_wrap(rng, tname):
    t = int_type(tname)
    sp = [t.min - 1, t.min, t.max, t.max + 1, t.size, -t.size, 1 << 40, -(1 << 40) - 1]
    pts = np.concatenate([fill(rng, sp, N // 8), rng.integers(-(1 << 50), 1 << 50, N // 8)])
    _check_term(op("wrap", Var("x0"), type=tname), 1, pts)


@pytest.mark.parametrize("prim", ["requant_double", "requant_single"])
def test_requant_fixed(rng, prim):
    cases = list(_requant_fixed_cases(prim))
    for _, m, s, out, zp in cases:
        pts = _fixed_points(prim, m, s, out, zp, rng, N // len(cases) + 1)
        _check_term(op(prim, Var("x0"), multiplier=m, shift=s, zp=zp, out=out), 1, pts)


REQUANT_FLOAT_CASES = [
    (0.0123, 3, "int8"),
    (float(R.onnx_requant_scale(0.02, 0.005, 0.1)), -128, "int8"),
    (3.0e-7, 128, "uint8"),  # steps above 2^24: float32(acc) is inexact there
    (0.5, 0, "int8"),  # every threshold is a half-step
    (float(np.float32(0.37)), 17, "uint8"),
]


@pytest.mark.parametrize("scale,zp,out", REQUANT_FLOAT_CASES)
def test_requant_float_symbolic(rng, scale, zp, out):
    ths = np.asarray(R.float_requant_thresholds(scale, zp, out))
    if ths.size > 300:
        ths = np.concatenate([ths[:50], ths[-50:], rng.choice(ths, 200, replace=False)])
    special = neighbours(ths.tolist())
    _unary_case(
        rng, op("requant_float", Var("x0"), scale=scale, zp=zp, out=out), special=special, n=N // 5
    )


def test_lut(rng):
    total = 0
    for tname in ("int8", "uint8", "int4", "uint4"):
        t = int_type(tname)
        for order in L.INDEX_ORDERS:
            for _ in range(8 if t.bits == 8 else 30):  # 8,192 + 1,920 points
                table = rng.integers(-128, 128, t.size)
                term = op("lut", Var("x0"), table=table, in_type=tname, index_order=order)
                xs = np.arange(t.min, t.max + 1)
                _check_term(term, 1, xs)
                total += xs.size
    # Outside the input type: the precondition is false in both domains (and numpy refuses).
    pre = PRIMITIVES["lut"].precondition
    for tname in ("int8", "uint8", "int4", "uint4"):
        t = int_type(tname)
        kw = dict(table=[0] * t.size, in_type=tname, index_order="offset")
        pts = np.array([t.min - 1, t.min, t.max, t.max + 1, INT32_MIN, INT32_MAX])
        want = (pts >= t.min) & (pts <= t.max)
        assert np.array_equal(pre(NUMPY, pts, **kw), want)
        x = Z3.var("x0")
        assert np.array_equal(z3_eval(pre(Z3, x, **kw), [x], pts).astype(bool), want)
    assert total >= N


def test_dot(rng):
    w = [3, -128, 127, 0, 1]
    term = op("dot", *(Var(f"x{i}") for i in range(5)), weights=w, x_zp=-5, w_zp=2, bias=1000)
    pts = rng.integers(-128, 128, size=(N, 5))
    pts[:8] = [[-128] * 5, [127] * 5, [0] * 5, [-5] * 5, [127, -128, 127, -128, 0],
               [-128, 127, -128, 127, 1], [1, 2, 3, 4, 5], [-1, -2, -3, -4, -5]]  # fmt: skip
    _check_term(term, 5, pts)


@pytest.mark.parametrize("c", [1, 2, 3, 7, 8, 100, 256, (1 << 20) + 1, 1 << 31])
def test_floordiv_mod(rng, c):
    sp = neighbours([c, -c, 2 * c, -2 * c, 0])
    pts = fill(rng, list(int32_boundaries()) + sp, N // 9 + 1)
    _check_term(op("floordiv_const", Var("x0"), c=c), 1, pts)
    _check_term(op("mod_const", Var("x0"), c=c), 1, pts)
    assert np.array_equal(
        evaluate(op("floordiv_const", Var("x0"), c=c), NUMPY, {"x0": pts}), pts // c
    )


# --- the underlying kernel functions --------------------------------------------------------


def _check_fn(fn, nvars: int, points: np.ndarray) -> None:
    zvars = [Z3.var(f"x{i}") for i in range(nvars)]
    pts = np.asarray(points, dtype=np.int64).reshape(len(points), nvars)
    sym = fn(Z3, *zvars)
    conc = np.broadcast_to(fn(NUMPY, *(pts[:, i] for i in range(nvars))), (len(pts),))
    got = z3_eval(sym, zvars, pts)
    bad = np.nonzero(got != conc)[0]
    assert bad.size == 0, (
        f"Z3 != numpy at {pts[bad[:5]].tolist()}: {got[bad[:5]]} vs {conc[bad[:5]]}"
    )


def test_srdhm(rng):
    b = int32_boundaries()
    special = [(INT32_MIN, INT32_MIN), (INT32_MIN, INT32_MAX), (INT32_MAX, INT32_MAX), (INT32_MIN, 1),
               (INT32_MIN, -1), (1 << 30, 1 << 30), (-(1 << 30), 1 << 30)]  # fmt: skip
    pts = np.concatenate([
        np.array(special),
        np.stack([rng.choice(b, N // 2), rng.choice(b, N // 2)], axis=1),
        np.stack([int32_random(rng, N // 2), rng.permutation(int32_random(rng, N // 2))], axis=1),
    ])  # fmt: skip
    _check_fn(R.srdhm, 2, pts)
    assert R.srdhm(NUMPY, np.int64(INT32_MIN), np.int64(INT32_MIN)) == INT32_MAX


def test_rdbpot(rng):
    for e in range(32):
        half = 1 << max(e - 1, 0)
        sp = neighbours([half, -half, 3 * half, -3 * half, 1 << e, -(1 << e)])
        _check_fn(lambda d, x, e=e: R.rdbpot(d, x, e), 1, fill(rng, sp, N // 32 + 1))


def test_mbqm_and_single_round(rng):
    for m, s in FIXED_SCALES:
        left = max(s, 0)
        lo, hi = INT32_MIN >> left, INT32_MAX >> left
        sp = _half_steps(m, s, rng, 100) + [lo, hi]
        pts = fill(rng, sp, N // len(FIXED_SCALES) + 1, lo, hi)
        _check_fn(lambda d, x, m=m, s=s: R.mbqm(d, x, m, s), 1, pts)
        if s <= 30:
            _check_fn(lambda d, x, m=m, s=s: R.single_round(d, x, m, s), 1, pts)


def test_saturate_wrap_direct(rng):
    pts = np.concatenate([fill(rng, [], N // 2), rng.integers(-(1 << 40), 1 << 40, N // 2)])
    for t in TYPES.values():
        if t.bits >= 64:
            continue
        _check_fn(lambda d, x, t=t: saturate(d, x, t), 1, pts[:: len(TYPES)])
        _check_fn(lambda d, x, t=t: wrap(d, x, t), 1, pts[1 :: len(TYPES)])


def test_lut_index(rng):
    for tname in ("int16", "uint16", "int8", "uint8"):
        t = int_type(tname)
        xs = fill(rng, [t.min, t.min + 1, -1, 0, 1, t.max - 1, t.max], N // 8, t.min, t.max)
        for order in L.INDEX_ORDERS:
            _check_fn(lambda d, x, t=t, o=order: L.lut_index(d, x, t, o), 1, xs)


def test_domain_floordiv(rng):
    for c in (3, 7, 10, 1000003):
        pts = fill(rng, neighbours([c, -c, 0]), N // 4)
        _check_fn(lambda d, x, c=c: d.floordiv(x, c), 1, pts)
