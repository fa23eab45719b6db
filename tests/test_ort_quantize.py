"""QuantizeLinear / DequantizeLinear: the kernel equals ONNX Runtime bit for bit.

Also documents where the ONNX reference implementation (onnx.reference), often
used as an oracle, differs from ONNX Runtime; the kernel follows ONNX Runtime.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import ort_models as M
import pytest
from onnx.reference import ReferenceEvaluator

from prover.inttypes import int_type
from prover.quantize import dequantize_linear, quantize_linear


def _float_inputs(rng, scale: float, zp: int, t, n: int = 4000) -> np.ndarray:
    """Random values, exact half-steps (k + 1/2) * scale, saturation edges, huge values and inf."""
    s = np.float32(scale)
    k = rng.integers(t.min - zp - 3, t.max - zp + 3, size=n)
    half = (k + 0.5).astype(np.float32) * s
    around = np.concatenate([np.nextafter(half, np.float32(np.inf)), np.nextafter(half, -np.inf)])
    rand = (rng.standard_normal(n) * (t.max - t.min) * 0.6 * s).astype(np.float32)
    edges = np.array([(t.min - zp - 0.5) * s, (t.max - zp + 0.5) * s], dtype=np.float32)
    big = np.array([3e38, -3e38, 1e10, -1e10, np.inf, -np.inf, 0.0, -0.0], dtype=np.float32)
    return np.concatenate([half, around, rand, edges, big]).astype(np.float32)


@pytest.mark.parametrize("out", ["int8", "uint8", "int16", "uint16"])
def test_quantize_linear_per_tensor(rng, out):
    t = int_type(out)
    for scale in (0.25, 1.0, float(np.float32(0.0123)), float(np.float32(3.7e-5)), 1000.0):
        zp = int(rng.integers(t.min, t.max + 1)) if t.bits == 8 else int(t.min + 17)
        x = _float_inputs(rng, scale, zp, t)
        ort_y = M.quantize_linear([x.size], scale, zp, out).run(None, {"x": x})[0]
        ours = quantize_linear(x, scale, zp, out)
        bad = np.nonzero(ours != ort_y.astype(np.int64))[0]
        assert bad.size == 0, f"scale {scale} zp {zp}: x={x[bad[:5]]} ours={ours[bad[:5]]}"


@pytest.mark.parametrize("out", ["int8", "uint8"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_quantize_linear_per_axis(rng, out, axis):
    t = int_type(out)
    shape = (5, 7)
    n = shape[axis]
    scales = (10 ** rng.uniform(-3, 0, n)).astype(np.float32)
    zps = rng.integers(t.min, t.max + 1, n)
    x = (rng.standard_normal(shape) * 100 * scales.max()).astype(np.float32)
    sess = M.quantize_linear(list(shape), scales, zps, out, axis=axis)
    got = sess.run(None, {"x": x})[0]
    assert np.array_equal(quantize_linear(x, scales, zps, out, axis=axis), got.astype(np.int64))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16"])
def test_dequantize_linear_per_tensor(rng, dtype):
    info = np.iinfo(dtype)
    x = np.arange(info.min, info.max + 1).astype(dtype)
    if x.size > 4096:
        x = np.concatenate([x[:100], x[-100:], rng.choice(x, 4000)]).astype(dtype)
    for scale in (0.1, float(np.float32(3.3e-3)), 7.0):
        zp = int(rng.integers(info.min, info.max + 1))
        got = M.dequantize_linear([x.size], scale, zp, dtype).run(None, {"x": x})[0]
        ours = dequantize_linear(x, scale, zp)
        assert ours.dtype == np.float32
        assert np.array_equal(ours.view(np.int32), got.view(np.int32))


def test_dequantize_linear_int32_above_2_pow_24(rng):
    """int32 -> float32 rounds above 2^24; ONNX Runtime and the kernel round the same way."""
    x = np.concatenate(
        [np.arange((1 << 24) - 5, (1 << 24) + 50), rng.integers(-(2**31), 2**31 - 1, 4000)]
    ).astype(np.int32)
    for scale in (1.0, float(np.float32(0.0371))):
        got = M.dequantize_linear([x.size], scale, 0, "int32").run(None, {"x": x})[0]
        ours = dequantize_linear(x, scale, 0)
        assert np.array_equal(ours.view(np.int32), got.view(np.int32))
    assert float(dequantize_linear([(1 << 24) + 1], 1.0, 0)[0]) == float(1 << 24)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_dequantize_linear_per_axis(rng, dtype):
    info = np.iinfo(dtype)
    shape = (3, 4, 5)
    for axis in (0, 1, 2):
        n = shape[axis]
        scales = (10 ** rng.uniform(-3, 1, n)).astype(np.float32)
        zps = rng.integers(info.min, info.max + 1, n)
        x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
        sess = M.dequantize_linear(list(shape), scales, zps, dtype, axis=axis)
        got = sess.run(None, {"x": x})[0]
        ours = dequantize_linear(x, scales, zps, axis=axis)
        assert np.array_equal(ours.view(np.int32), got.view(np.int32))


def test_quantize_huge_values_saturate_like_ort_not_like_onnx_reference():
    """ORT clamps before converting to an integer: 1e10 saturates to 127.

    onnx.reference rounds first and casts to int32 (`np.rint(x).astype(np.int32)`), which
    wraps for |x / scale| >= 2^31; the spec text says saturate, ORT does, the kernel does.
    """
    x = np.array([1e10, -1e10, 3e9], dtype=np.float32)
    got = M.quantize_linear([3], 1.0, 0, "int8").run(None, {"x": x})[0]
    assert got.tolist() == [127, -128, 127]
    assert quantize_linear(x, 1.0, 0, "int8").tolist() == [127, -128, 127]


def test_onnx_reference_quantize_agrees_on_ordinary_inputs(rng):
    """Sanity check of the oracle comparison above: on in-range inputs all three agree."""
    x = (rng.standard_normal(2000) * 5).astype(np.float32)
    model = M.quantize_linear([x.size], 0.05, 3, "int8")
    ref = ReferenceEvaluator(_model_proto(model))
    r = ref.run(None, {"x": x})[0]
    assert np.array_equal(r.astype(np.int64), quantize_linear(x, 0.05, 3, "int8"))
    assert np.array_equal(model.run(None, {"x": x})[0], r)


def _model_proto(sess: ort.InferenceSession):
    import onnx

    return onnx.load_from_string(sess.model_bytes)
