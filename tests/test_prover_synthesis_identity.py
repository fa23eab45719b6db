"""The vectorised synthesis search gives exactly the scalar search's results.

`synthesis._boundary` (a closed form for the multiplier at which `Q(x; M)` crosses a
level, checked on the kernel's formula, searched where the check fails) and the chunked
`synthesis._enumerate` replaced a binary search per row and a loop per change point. The
scalar versions are the reference here (`_boundary_search` stays in the module as the
fallback; the old per-point loop is copied below) and both paths run on random rows,
random epilogues and the digits models' column groups: same multipliers, shifts, zero
points and tables, same conflicting pairs, same shared-table outcomes.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from contextlib import contextmanager

import numpy as np
import pytest

from prover import shared_table as ST
from prover import synthesis as S
from prover.lut import build_ort_sigmoid_table
from prover.terms import Var, op

ACC = Var("acc")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _enumerate_scalar(p, ms, points):
    """The change-point loop `_enumerate` replaced (verbatim): the reference."""
    first = np.full(len(ms), len(points), dtype=np.int64)
    for j, c in enumerate(points.tolist()):
        alive = first == len(points)
        if not alive.any():
            break
        m = ms[alive]
        bad = S._q(p.scheme, p.shift, c - 1, m) >= S._q(p.scheme, p.shift, c, m)
        idx = np.flatnonzero(alive)[bad]
        first[idx] = j
    return first


@contextmanager
def _scalar(monkeypatch):
    """Inside: the search runs the scalar reference (binary search, per-point loop)."""
    with monkeypatch.context() as m:
        m.setattr(S, "_boundary", S._boundary_search)
        m.setattr(S, "_enumerate", _enumerate_scalar)  # shared_table reaches it through S
        yield


def _both(monkeypatch, f):
    """`f()` on the fast path and on the scalar reference."""
    fast = f()
    with _scalar(monkeypatch):
        slow = f()
    return fast, slow


def _syn(s: S.Synthesis):
    c = s.conflict
    conflict = None if c is None else (c.pair, c.outputs, c.prefix, c.change_points)
    params = None if s.params is None else s.params.to_json()
    return s.status, params, conflict, s.change_points, s.shifts_tried


def _shared(sh: ST.SharedSynthesis):
    full = sh.complete
    return (
        sh.status,
        None if sh.params is None else [p.to_json() for p in sh.params],
        {i: (c.pair, c.prefix) for i, c in sh.conflicts.items()},
        [_syn(a) for a in sh.alone],
        sh.candidates_tried,
        sh.unfit,
        None if full is None else (full.status, full.minimal, full.options, full.witnesses),
    )


def _decided(r: ST.SharedTableResult):
    return r.status, r.params, r.minimal, r.options, r.witnesses, r.note


def _rows(rng, n=64):
    """Random (scheme, shift, xs, ks, a, b) rows over the whole domain: int32 accumulators
    (the left shift kept inside int32), levels near zero and near +-2^31, wide and
    narrow multiplier ranges."""
    scheme = str(rng.choice(["fixed_double", "fixed_single"]))
    shift = int(rng.integers(-31, 31 if scheme == "fixed_single" else 32))
    lim = (1 << 31) >> (max(shift, 0) if scheme == "fixed_double" else 0)
    mag = min(int(rng.choice([4, 300, 1 << 16, lim])), lim)
    xs = rng.integers(-mag, mag, size=n).astype(np.int64)
    xs[:3] = [0, -mag, mag - 1]
    ks = [
        rng.integers(-300, 300, size=n),
        rng.integers(-(1 << 32), 1 << 32, size=n),
        rng.choice([1 << 31, -(1 << 31), (1 << 31) - 1, 0, 1, -1], size=n),
    ][int(rng.integers(0, 3))].astype(np.int64)
    a = int(rng.choice([0, int(rng.integers(0, 1 << 30))]))
    b = min(int(rng.choice([(1 << 31) - 1, a + int(rng.integers(0, 5000))])), (1 << 31) - 1)
    return scheme, shift, xs, ks, a, b


@pytest.mark.parametrize("seed", range(3))
def test_closed_form_equals_the_binary_search(seed):
    """The closed form alone is already exact (the check never has to fall back here)."""
    rng = np.random.default_rng(seed)
    for _ in range(300):
        scheme, shift, xs, ks, a, b = _rows(rng)
        want = S._boundary_search(scheme, shift, xs, ks, a, b)
        guess = S._boundary_guess(scheme, shift, xs, ks, a, b)
        assert np.array_equal(guess, want), (scheme, shift, a, b)
        assert np.array_equal(S._boundary(scheme, shift, xs, ks, a, b), want)


def test_a_wrong_closed_form_is_caught_and_searched(monkeypatch):
    """The check, not the formula, decides: guesses off by a few are repaired."""
    rng = np.random.default_rng(7)
    right = S._boundary_guess
    off = 0
    for _ in range(100):
        scheme, shift, xs, ks, a, b = _rows(rng)
        noise = rng.integers(-3, 4, size=len(xs))
        monkeypatch.setattr(
            S,
            "_boundary_guess",
            lambda *args, n=noise: np.clip(right(*args) + n, args[4], args[5] + 1),
        )
        got = S._boundary(scheme, shift, xs, ks, a, b)
        off += int((S._boundary_guess(scheme, shift, xs, ks, a, b) != got).sum())
        assert np.array_equal(got, S._boundary_search(scheme, shift, xs, ks, a, b))
    assert off > 1000  # the wrong guesses were really wrong


@pytest.mark.parametrize("chunk", [1, 7, S._CHUNK])
def test_chunked_enumerate_equals_the_loop(chunk, monkeypatch):
    monkeypatch.setattr(S, "_CHUNK", chunk)
    rng = np.random.default_rng(chunk)
    for _ in range(20):
        scheme = str(rng.choice(["fixed_double", "fixed_single"]))
        shift = int(rng.integers(10, 24))
        pts = rng.integers(-20_000, 20_000, size=int(rng.integers(1, 300)))
        pts = pts[np.lexsort((pts, np.abs(pts)))]
        start = int(rng.integers(0, 1 << 22))
        ms = np.arange(start, start + int(rng.integers(1, 4096)), dtype=np.int64)
        p = S._Problem(scheme, shift, -20_000, 20_000, pts, -127, 127, 253, (-128, 127),
                       -128, 127, S.INT32_MAX, 0.0)  # fmt: skip
        assert np.array_equal(S._enumerate(p, ms, pts), _enumerate_scalar(p, ms, pts))


def _sigmoid_group(rng, sig_in=None):
    """A random int8 Sigmoid epilogue over one random weight column's range (the Sigmoid's
    input `(scale, zero point)` random unless given)."""
    k = int(rng.choice([16, 64, 256]))
    w = rng.integers(-127, 128, size=k)
    lo, hi = int(np.minimum(w, 0).sum() * 128), int(np.maximum(w, 0).sum() * 127)
    scale = float(np.float32(128.0 / ((hi - lo) / rng.uniform(8.0, 40.0))))
    zp = int(rng.integers(-10, 11))
    in_scale, zp = sig_in or (float(rng.uniform(0.02, 0.1)), zp)
    sig = build_ort_sigmoid_table(in_scale, zp, "int8", 1 / 256, -128, "int8", fused=True)
    t = op("requant_float", ACC, scale=scale, zp=zp, out="int8")
    return (
        op("lut", t, table=tuple(int(v) for v in sig), in_type="int8", index_order="offset"),
        lo,
        hi,
    )


SPACES = [
    S.FixedPointSpace(),
    S.FixedPointSpace(schemes=("fixed_single",), index_order="twos_complement"),
    S.FixedPointSpace(schemes=("fixed_double", "fixed_single"), zero_point="fixed"),
    S.FixedPointSpace(intermediate_type="uint8", shift_min=-4, shift_max=12),
]


def _int4_case(rng):
    """A small int4 epilogue and a narrow space (impossible about half the time)."""
    scale = float(np.float32(rng.uniform(0.01, 0.12)))
    zp = int(rng.integers(-4, 4))
    table = rng.integers(-3, 4, size=16)
    t = op("requant_float", ACC, scale=scale, zp=zp, out="int4")
    before = op("lut", t, table=tuple(int(v) for v in table), in_type="int4", index_order="offset")
    space = S.FixedPointSpace(
        schemes=(("fixed_double",), ("fixed_single",), ("fixed_double", "fixed_single"))[
            int(rng.integers(0, 3))
        ],
        shift_min=16,
        shift_max=23,
        multiplier_max=int(rng.integers(40, 200)),
        zero_point=str(rng.choice(["free", "fixed"])),
        intermediate_type="int4",
    )
    return before, -int(rng.integers(20, 260)), int(rng.integers(20, 260)), space


@pytest.mark.parametrize("seed", range(2))
def test_synthesis_identical_on_random_epilogues(seed, monkeypatch):
    """Same answer (found or impossible, every parameter, the pair) in every space; the
    sample holds both outcomes."""
    rng = np.random.default_rng(40 + seed)
    cases = [(*_sigmoid_group(rng), SPACES[i % len(SPACES)]) for i in range(4)]
    cases += [_int4_case(rng) for _ in range(16)]
    statuses = set()
    for before, lo, hi, space in cases:
        fast, slow = _both(
            monkeypatch,
            lambda b=before, lo=lo, hi=hi, s=space: _syn(S.synthesize(b, "acc", lo, hi, s)),
        )
        assert fast == slow
        statuses.add(fast[0])
    assert statuses == {"found", "impossible"}


def test_shared_tables_identical(monkeypatch):
    """synthesize_shared (candidate tables, fit_table) and the exhaustive search
    (shared_table.decide: its options, minimal set, witnesses) give the same outcome."""
    rng = np.random.default_rng(3)
    outcomes = set()
    for site in range(2):  # one Sigmoid after both groups (as in one MatMul), or two
        sig_in = (float(rng.uniform(0.02, 0.1)), int(rng.integers(-10, 11))) if site else None
        groups = [
            (b, "acc", lo, hi) for b, lo, hi in (_sigmoid_group(rng, sig_in) for _ in range(2))
        ]
        space = S.FixedPointSpace(index_order="twos_complement")
        fast, slow = _both(
            monkeypatch, lambda g=groups, s=space: _shared(ST.synthesize_shared(g, s, budget_s=1e9))
        )
        assert fast == slow
        fast, slow = _both(monkeypatch, lambda g=groups, s=space: _decided(ST.decide(g, s, 1e9)))
        assert fast == slow
        outcomes.add(fast[0])
    assert outcomes == {"found", "impossible"}


def _bench():
    spec = importlib.util.spec_from_file_location(
        "synthesis_bench", os.path.join(ROOT, "bench", "synthesis_bench.py")
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("synthesis_bench", mod)  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    "model,every",
    [("digits_matmul_qop_u8s8_pc", 12), ("digits_gemm_qop_s8s8_pt", 1)]
    + [
        pytest.param(m, 1, marks=pytest.mark.slow)
        for m in (
            "digits_gemm_qop_s8s8_pc",
            "digits_matmul_qop_s8s8_pc",
            "digits_matmul_qop_u8s8_pc",
            "digits_matmul_qop_u8s8_pt",
        )  # fmt: skip
    ],
)
def test_digits_column_groups_identical(model, every, monkeypatch):
    """The digits models' column groups (as the benchmark groups them): every `every`-th
    group by default, all of them and the sites' shared tables under -m slow."""
    bench = _bench()
    groups = bench.digits_groups(os.path.join(bench.DIGITS, model + ".onnx"))[::every]
    for g in groups:
        for space in (bench.SPACE, bench.SINGLE):
            fast, slow = _both(
                monkeypatch, lambda g=g, s=space: _syn(S.synthesize(g.before, "acc", g.lo, g.hi, s))
            )
            assert fast == slow, (g.site, g.columns)
    if every == 1:
        sites: dict[str, list] = {}
        for g in groups:
            sites.setdefault(g.site, []).append((g.before, "acc", g.lo, g.hi))
        for specs in sites.values():
            fast, slow = _both(
                monkeypatch,
                lambda s=specs: _shared(ST.synthesize_shared(s, bench.SPACE, budget_s=1e9)),
            )
            assert fast == slow
