"""Bit-exact numpy emulation of the ONNX Runtime (MLAS) float kernels the kernel depends on.

ONNX Runtime builds a QLinearSigmoid table by dequantizing all 256 inputs,
running MLAS's logistic kernel on them and quantizing the results. MLAS does not
compute `1 / (1 + exp(-x))`: it evaluates Eigen's rational approximation
`x * P(x^2) / Q(x^2) + 1/2` in float32 on an input clamped to [-18, 18]. Which
machine code runs depends on the CPU:

- x86-64 with AVX2+FMA3 (`MlasComputeLogisticF32KernelFma3`) and ARM64 NEON: the
  Horner steps are fused multiply-adds (one rounding each); the result is only
  clamped below at 0;
- the portable/SSE2 kernel (`MlasLogisticKernel`): each Horner step is a float32
  multiply then a float32 add (two roundings); the result is clamped to [0, 1].

`mlas_tanh` does the same for MLAS's tanh (Eigen's 13/6 rational, input clamped
to [-9, 9]), which ONNX Runtime's float Tanh runs (e.g. in a QDQ Tanh).

Both are emulated here exactly in float32 (a fused multiply-add is emulated with
float64 and round-to-odd, which makes the final rounding to float32 correct).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F32 = np.float32

# Eigen's logistic coefficients as MLAS stores them (float32 literals).
LOWER_RANGE = F32(-18.0)
UPPER_RANGE = F32(18.0)
ALPHA = tuple(
    F32(v)
    for v in (
        4.37031012579801e-11,  # alpha_9
        1.15627324459942e-07,  # alpha_7
        6.08574864600143e-05,  # alpha_5
        8.51377133304701e-03,  # alpha_3
        2.48287947061529e-01,  # alpha_1
    )
)
BETA = tuple(
    F32(v)
    for v in (
        6.10247389755681e-13,  # beta_10
        5.76102136993427e-09,  # beta_8
        6.29106785017040e-06,  # beta_6
        1.70198817374094e-03,  # beta_4
        1.16817656904453e-01,  # beta_2
        9.93151921023180e-01,  # beta_0
    )
)


def fma32(a: npt.ArrayLike, b: npt.ArrayLike, c: npt.ArrayLike) -> np.ndarray:
    """float32 fused multiply-add `a*b + c` with a single rounding (round half to even).

    The float32 product is exact in float64; the float64 sum is turned into its
    round-to-odd value (exact when the sum is), and 53 >= 24 + 2 bits make the
    final conversion to float32 a correctly rounded result.
    """
    a64 = np.asarray(a, dtype=F32).astype(np.float64)
    b64 = np.asarray(b, dtype=F32).astype(np.float64)
    c64 = np.asarray(c, dtype=F32).astype(np.float64)
    p = a64 * b64
    s = p + c64
    # TwoSum: the exact rounding error of s = p + c.
    bv = s - p
    err = (p - (s - bv)) + (c64 - bv)
    if not err.any():  # the float64 sum is exact: its one rounding to float32 is the FMA's
        return s.astype(F32)
    even = (s.view(np.int64) & 1) == 0
    toward = np.nextafter(s, np.where(err > 0, np.inf, -np.inf))
    odd = np.where((err != 0) & even, toward, s)
    return odd.astype(F32)


def _mul_add(a, b, c, fused: bool) -> np.ndarray:
    if fused:
        return fma32(a, b, c)
    return (a * b + c).astype(F32)


def _horner(v2: np.ndarray, coefs: tuple, fused: bool) -> np.ndarray:
    """MLAS's Horner chain: p = v2*c0 + c1; p = p*v2 + c_k ... (one FMA or mul+add per step)."""
    p = _mul_add(v2, np.full_like(v2, coefs[0]), np.full_like(v2, coefs[1]), fused)
    for coef in coefs[2:]:
        p = _mul_add(p, v2, np.full_like(v2, coef), fused)
    return p


def mlas_logistic(x: np.ndarray, fused: bool = True) -> np.ndarray:
    """MLAS's float32 logistic function (see the module docstring for `fused`)."""
    v = np.asarray(x, dtype=F32)
    v = np.minimum(np.maximum(v, LOWER_RANGE), UPPER_RANGE)
    v2 = v * v
    p = v * _horner(v2, ALPHA, fused)
    q = _horner(v2, BETA, fused)
    r = p / q + F32(0.5)
    r = np.maximum(r, F32(0.0))
    if not fused:
        r = np.minimum(r, F32(1.0))
    return r.astype(F32)


# Eigen's tanh coefficients as MLAS stores them (ORT 1.32: input clamped to [-9, 9]).
TANH_RANGE = F32(9.0)
TANH_ALPHA = tuple(
    F32(v)
    for v in (
        -2.76076847742355e-16,  # alpha_13
        2.00018790482477e-13,  # alpha_11
        -8.60467152213735e-11,  # alpha_9
        5.12229709037114e-08,  # alpha_7
        1.48572235717979e-05,  # alpha_5
        6.37261928875436e-04,  # alpha_3
        4.89352455891786e-03,  # alpha_1
    )
)
TANH_BETA = tuple(
    F32(v)
    for v in (
        1.19825839466702e-06,  # beta_6
        1.18534705686654e-04,  # beta_4
        2.26843463243900e-03,  # beta_2
        4.89352518554385e-03,  # beta_0
    )
)


def mlas_tanh(x: np.ndarray, fused: bool = True) -> np.ndarray:
    """MLAS's float32 tanh: x * P(x^2) / Q(x^2) on x clamped to [-9, 9].

    The fused form is verified bit-exact against ONNX Runtime 1.32's float Tanh on
    x86-64 (AVX2/FMA3); the unfused form follows the portable kernel's structure
    but is not verified on a machine that runs it.
    """
    v = np.asarray(x, dtype=F32)
    v = np.minimum(np.maximum(v, -TANH_RANGE), TANH_RANGE)
    v2 = v * v
    p = v * _horner(v2, TANH_ALPHA, fused)
    q = _horner(v2, TANH_BETA, fused)
    return (p / q).astype(F32)


def host_uses_fma() -> bool:
    """Whether ONNX Runtime's MLAS picks the fused-multiply-add logistic kernel on this machine.

    x86-64: only with AVX2 and FMA3 (else the SSE2 kernel); ARM64: always (NEON
    `vfmaq_f32`). Other machines: False (the portable kernel; not verified).
    """
    import platform

    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return True
    if machine not in ("x86_64", "amd64"):
        return False
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return {"avx2", "fma"} <= flags
    except OSError:
        pass
    return False
