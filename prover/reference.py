"""Named reference semantics: what "equals ONNX Runtime" means for a check.

ONNX Runtime's CPU results depend on the machine (DESIGN.md, "Reference semantics"):
- uint8 activations x int8 weights: x86 CPUs without VNNI (AVX2-only, AVX-512 without
  VNNI) run MLAS's `vpmaddubsw` kernel, which adds each pair of adjacent raw products
  (k = 2i, 2i+1) with int16 saturation before the int32 sum; VNNI, ARM and the ONNX
  spec sum exactly;
- the MLAS logistic/tanh differ with and without FMA (`prover.mlas`).

A profile names one such choice for every variant, so verdicts, counterexamples and
proof hashes depend on the profile a user names, never on the CPU running the check.
The default, `onnx`, is machine-independent: exact integer accumulation (what the ONNX
spec, VNNI and ARM CPUs and the NPU share) with ONNX Runtime's rounding choices and its
FMA logistic/tanh (the kernel every x86-64 AVX2 and ARM64 CPU runs). `ort-host` is not
a profile of its own: the compiler resolves it to the profile this machine's ONNX
Runtime matches, found by probing it once per process.

The prover knows nothing of ONNX Runtime; a profile is plain data here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Accumulation(StrEnum):
    """How uint8 x int8 products are summed into the int32 accumulator."""

    EXACT = "exact"
    PAIR_SATURATING_INT16 = "pair_saturating_int16"


@dataclass(frozen=True, kw_only=True)
class ReferenceProfile:
    """One named choice of every machine-dependent ONNX Runtime CPU behaviour."""

    name: str
    u8s8_accumulation: Accumulation
    mlas_fma: bool
    summary: str

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "u8s8_accumulation": str(self.u8s8_accumulation),
            "mlas_fma": self.mlas_fma,
            "summary": self.summary,
        }


ONNX = ReferenceProfile(
    name="onnx",
    u8s8_accumulation=Accumulation.EXACT,
    mlas_fma=True,
    summary=(
        "exact int32 accumulation (ONNX spec; ORT on VNNI x86 and ARM64), ORT float32 "
        "requantization, MLAS FMA logistic/tanh"
    ),
)
ORT_X86_AVX2 = ReferenceProfile(
    name="ort-x86-avx2",
    u8s8_accumulation=Accumulation.PAIR_SATURATING_INT16,
    mlas_fma=True,
    summary=(
        "ORT on x86 without VNNI: uint8 x int8 pairs summed with int16 saturation "
        "(vpmaddubsw), MLAS FMA logistic/tanh"
    ),
)

PROFILES: dict[str, ReferenceProfile] = {p.name: p for p in (ONNX, ORT_X86_AVX2)}
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
