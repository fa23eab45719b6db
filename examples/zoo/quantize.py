"""ONNX Runtime quantization of a float zoo model into one variant (variants.Variant)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process

CALIBRATION_BATCHES = 8


class RandomReader(CalibrationDataReader):
    """Calibration data: `n` random input sets (the same for every variant of a model)."""

    def __init__(self, names: list[str], sample, n: int = CALIBRATION_BATCHES) -> None:
        self._feeds = [dict(zip(names, sample(100 + i), strict=True)) for i in range(n)]
        self._it = iter(self._feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = iter(self._feeds)


def _qtype(code: str) -> QuantType:
    return {"u8": QuantType.QUInt8, "s8": QuantType.QInt8}[code]


def quantize(float_model: Path, out: Path, variant, names: list[str], sample) -> None:
    """Quantize `float_model` into `out` as `variant` (quant_pre_process first if it says so)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = float_model
        if variant.pre:
            src = Path(tmp) / "pre.onnx"
            quant_pre_process(str(float_model), str(src))
        if variant.format == "dyn":
            quantize_dynamic(
                str(src),
                str(out),
                per_channel=variant.per_channel,
                weight_type=_qtype(variant.weights),
            )
            return
        quantize_static(
            str(src),
            str(out),
            RandomReader(names, sample),
            quant_format=QuantFormat.QOperator if variant.format == "qop" else QuantFormat.QDQ,
            per_channel=variant.per_channel,
            activation_type=_qtype(variant.activations),
            weight_type=_qtype(variant.weights),
        )
