"""The quantization variants of the zoo and their file names (no torch, no onnxruntime here).

A model file is named `<arch>__<variant>.onnx`, where the variant is
`<format>_<types>_<granularity>[_pre]`:

- format: `qop` (QOperator: QLinearConv, QLinearMatMul, ...), `qdq` (QuantizeLinear /
  DequantizeLinear around float ops, ORT's default), `dyn` (`quantize_dynamic`:
  DynamicQuantizeLinear + MatMulInteger/ConvInteger, weights only are calibrated);
- types: activations then weights, `u8s8` (ORT's default), `s8s8`, `u8u8`;
- granularity: `pt` (per tensor) or `pc` (per channel weights);
- `_pre`: `onnxruntime.quantization.shape_inference.quant_pre_process` ran first (the flow
  ORT's documentation gives: symbolic shape inference, ORT's basic optimisations, ONNX
  shape inference), then the quantizer.
"""

from __future__ import annotations

from dataclasses import dataclass

TYPES = {"u8": "QUInt8", "s8": "QInt8"}


@dataclass(frozen=True)
class Variant:
    """One way of quantizing a float model."""

    format: str  # "qop" | "qdq" | "dyn"
    activations: str  # "u8" | "s8" (dynamic: always u8, DynamicQuantizeLinear's type)
    weights: str  # "u8" | "s8"
    per_channel: bool
    pre: bool = False

    @property
    def name(self) -> str:
        gran = "pc" if self.per_channel else "pt"
        return f"{self.format}_{self.activations}{self.weights}_{gran}" + (
            "_pre" if self.pre else ""
        )


def _static(pre: bool = False) -> list[Variant]:
    return [
        Variant(fmt, act, "s8", pc, pre)
        for fmt in ("qop", "qdq")
        for act in ("u8", "s8")
        for pc in (False, True)
    ]


# Every static combination, plus the four of the convolution issue after quant_pre_process
STATIC = _static() + [
    Variant("qop", "u8", "s8", False, True),
    Variant("qop", "s8", "s8", True, True),
    Variant("qdq", "u8", "s8", True, True),
    Variant("qdq", "s8", "s8", False, True),
]
DYNAMIC = [
    Variant("dyn", "u8", "s8", False),
    Variant("dyn", "u8", "s8", True),
    Variant("dyn", "u8", "u8", False),
    Variant("dyn", "u8", "s8", False, True),
]


def parse(name: str) -> Variant:
    """The variant a name such as `qdq_u8s8_pc_pre` stands for (ValueError if none)."""
    parts = name.split("_")
    pre = parts[-1] == "pre"
    if pre:
        parts = parts[:-1]
    if len(parts) != 3 or parts[0] not in ("qop", "qdq", "dyn") or parts[2] not in ("pt", "pc"):
        raise ValueError(f"not a variant name: {name!r}")
    t = parts[1]
    act, w = t[:2], t[2:]
    if act not in TYPES or w not in TYPES:
        raise ValueError(f"not a variant name: {name!r}")
    v = Variant(parts[0], act, w, parts[2] == "pc", pre)
    assert v.name == name
    return v


def file_name(arch: str, variant: Variant) -> str:
    """`<arch>__<variant>.onnx`."""
    return f"{arch}__{variant.name}.onnx"
