"""requant_float (direct float32 in numpy) == requant_float_steps (the exact integer staircase)."""

from __future__ import annotations

import numpy as np
import pytest

from prover import requant as R
from prover.domain import NUMPY
from prover.inttypes import INT32_MAX, INT32_MIN, int_type


def _scales(rng: np.random.Generator, n: int) -> list[float]:
    """Log-uniform scales from 1e-9 to 10, plus exact powers of two and ORT-style products."""
    out = [float(np.float32(10 ** rng.uniform(-9, 1))) for _ in range(n)]
    out += [2.0**-k for k in (0, 1, 7, 20, 31)]
    out += [
        float(R.onnx_requant_scale(0.0078125, 0.00390625, 0.05)),
        float(R.onnx_requant_scale(0.1, 0.2, 0.3)),
        float(np.nextafter(np.float32(0.5), np.float32(1))),
        float(np.nextafter(np.float32(0.5), np.float32(0))),
    ]
    return out


@pytest.mark.parametrize("out", ["int8", "uint8", pytest.param("int16", marks=pytest.mark.slow)])
def test_staircase_equals_float_on_thresholds_and_random(rng, out):
    t = int_type(out)
    checked = 0
    for scale in _scales(rng, 40):
        zp = int(rng.integers(t.min, t.max + 1))
        ths = np.asarray(R.float_requant_thresholds(scale, zp, out), dtype=np.int64)
        assert np.all(np.diff(ths) >= 0), "thresholds must be sorted"
        pts = np.concatenate(
            [
                (ths[:, None] + np.arange(-2, 3)[None, :]).ravel(),
                rng.integers(INT32_MIN, INT32_MAX, 2000, endpoint=True),
                rng.integers(-(1 << 25), 1 << 25, 2000),
                [INT32_MIN, INT32_MIN + 1, -1, 0, 1, INT32_MAX - 1, INT32_MAX],
                np.arange(-(1 << 24) - 3, -(1 << 24) + 4),
                np.arange((1 << 24) - 3, (1 << 24) + 4),
            ]
        )
        pts = np.clip(pts, INT32_MIN, INT32_MAX)
        direct = R.requant_float(NUMPY, pts, scale, zp, t)
        steps = R.requant_float_steps(NUMPY, pts, scale, zp, t)
        bad = np.nonzero(direct != steps)[0]
        assert bad.size == 0, f"scale {scale} zp {zp}: differ at {pts[bad[:5]].tolist()}"
        checked += pts.size
        # Each reached threshold inside int32 is exactly where the value steps up.
        inner = ths[(ths > INT32_MIN) & (ths <= INT32_MAX)]
        if inner.size:
            lo = R.requant_float(NUMPY, inner - 1, scale, zp, t)
            hi = R.requant_float(NUMPY, inner, scale, zp, t)
            assert np.all(hi > lo), f"scale {scale} zp {zp}: a threshold is not a step"
    assert checked > 100_000


def test_staircase_is_exact_above_2_pow_24():
    """Above 2^24 float32(acc) rounds: the staircase follows the float32, not the real product."""
    scale = 2.0**-24  # float32(acc) * 2^-24 is exact: only the int -> float32 rounding matters
    halves = (2 * np.arange(1, 60) + 1) * (1 << 23)  # acc * scale = k + 1/2 exactly
    acc = (halves[:, None] + np.arange(-3, 4)[None, :]).ravel()
    t = int_type("int16")
    direct = R.requant_float(NUMPY, acc, scale, 0, t)
    steps = R.requant_float_steps(NUMPY, acc, scale, 0, t)
    assert np.array_equal(direct, steps)
    f32 = np.rint(acc.astype(np.float32).astype(np.float64) * scale).astype(np.int64)
    assert np.array_equal(direct, f32)
    # acc = half-step + 1 rounds onto the half-step in float32 (ties to even), so the
    # float32 result differs from real arithmetic there.
    real = np.rint(acc.astype(np.float64) * scale).astype(np.int64)
    assert (direct != real).sum() >= 30
