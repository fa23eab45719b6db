"""Named reference semantics: what "equals ONNX Runtime" means for a check.

ONNX Runtime's CPU results depend on the machine (DESIGN.md, "Reference semantics"):
- uint8 activations x int8 weights: x86 CPUs without VNNI (AVX2-only, AVX-512 without
  VNNI) run MLAS's `vpmaddubsw` kernel, which adds each pair of adjacent raw products
  (k = 2i, 2i+1) with int16 saturation before the int32 sum; VNNI, ARM and the ONNX
  spec sum exactly;
- the MLAS logistic/tanh differ with and without FMA (`prover.mlas`);
- QDQ groups (DequantizeLinear -> op -> QuantizeLinear): with graph optimisations off ORT
  runs the float graph ONNX defines; at its default level (ORT_ENABLE_ALL) its QDQ
  transformers run integer kernels instead (measured with ORT 1.32 on the digits models:
  QLinearMatMul, QGemm, QLinearAdd (uint8 only; an int8 bias Add stays a float
  DQ -> Add -> Q), QLinearSigmoid, QLinearSoftmax), whose results differ.

A profile names one such choice for every variant, so verdicts, counterexamples and
proof hashes depend on the profile a user names, never on the CPU running the check.
The default, `onnx`, is machine-independent: exact integer accumulation (what the ONNX
spec, VNNI and ARM CPUs and the NPU share) with ONNX Runtime's rounding choices and its
FMA logistic/tanh (the kernel every x86-64 AVX2 and ARM64 CPU runs). `ort-host` is not
a profile of its own: the compiler resolves it to the profile this machine's ONNX
Runtime matches, found by probing it once per process.

QDQ reading. Every shipped profile reads QDQ groups the integer way (`QdqReading.INTEGER`)
except the `*-qdq-float` ones. Integer is the default because it is what a user deploying
to an NPU runs: NPU toolchains compile a DQ -> MatMul -> Q group as an integer MatMul with
a requantizing epilogue, and ORT itself, at the level every InferenceSession uses unless
told otherwise, runs the same integer kernels; so QDQ sites can be proven bitwise against
what ORT actually computes. The float reading (`onnx-qdq-float`) is the ONNX spec's
literal graph: the float MatMul/Gemm stays on the host (ORT runs it) and its sites get
the `float_accumulation` reason (a float32 sum in ORT's order is not an integer epilogue).

The prover knows nothing of ONNX Runtime; a profile is plain data here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Accumulation(StrEnum):
    """How uint8 x int8 products are summed into the int32 accumulator."""

    EXACT = "exact"
    PAIR_SATURATING_INT16 = "pair_saturating_int16"


class QdqReading(StrEnum):
    """How DequantizeLinear -> op -> QuantizeLinear groups are read."""

    INTEGER = "integer"  # ORT's default-level QDQ transformers; what an NPU compiles
    FLOAT = "float"  # the float graph as ONNX defines it (ORT with optimisations off)


@dataclass(frozen=True, kw_only=True)
class ReferenceProfile:
    """One named choice of every machine-dependent ONNX Runtime CPU behaviour."""

    name: str
    u8s8_accumulation: Accumulation
    mlas_fma: bool
    summary: str
    qdq_reading: QdqReading = QdqReading.INTEGER

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "u8s8_accumulation": str(self.u8s8_accumulation),
            "mlas_fma": self.mlas_fma,
            "summary": self.summary,
            "qdq_reading": str(self.qdq_reading),
        }


ONNX = ReferenceProfile(
    name="onnx",
    u8s8_accumulation=Accumulation.EXACT,
    mlas_fma=True,
    summary=(
        "exact int32 accumulation (ONNX spec; ORT on VNNI x86 and ARM64), ORT float32 "
        "requantization, MLAS FMA logistic/tanh; QDQ groups read as ORT's default-level "
        "integer kernels"
    ),
)
ORT_X86_AVX2 = ReferenceProfile(
    name="ort-x86-avx2",
    u8s8_accumulation=Accumulation.PAIR_SATURATING_INT16,
    mlas_fma=True,
    summary=(
        "ORT on x86 without VNNI: uint8 x int8 pairs summed with int16 saturation "
        "(vpmaddubsw), MLAS FMA logistic/tanh; QDQ groups read as ORT's default-level "
        "integer kernels"
    ),
)


_INTEGER_QDQ = "QDQ groups read as ORT's default-level integer kernels"
_FLOAT_QDQ = "QDQ groups read as the float graph (ORT with optimisations off)"


def _qdq_float(p: ReferenceProfile) -> ReferenceProfile:
    return ReferenceProfile(
        name=f"{p.name}-qdq-float",
        u8s8_accumulation=p.u8s8_accumulation,
        mlas_fma=p.mlas_fma,
        summary=p.summary.replace(_INTEGER_QDQ, _FLOAT_QDQ),
        qdq_reading=QdqReading.FLOAT,
    )


ONNX_QDQ_FLOAT = _qdq_float(ONNX)
ORT_X86_AVX2_QDQ_FLOAT = _qdq_float(ORT_X86_AVX2)

# Integer-reading profiles first: `ort-host` resolves to the first match (ORT's default level).
PROFILES: dict[str, ReferenceProfile] = {
    p.name: p for p in (ONNX, ORT_X86_AVX2, ONNX_QDQ_FLOAT, ORT_X86_AVX2_QDQ_FLOAT)
}
DEFAULT_PROFILE = ONNX.name
HOST = "ort-host"  # resolved by the compiler (it may probe onnxruntime; the prover may not)
CHOICES = (*PROFILES, HOST)


def get_profile(name: str) -> ReferenceProfile:
    """The named machine-independent profile (`ort-host` is resolved by the compiler)."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(
            f"unknown reference {name!r}; choose one of {', '.join(CHOICES)}"
        ) from None
