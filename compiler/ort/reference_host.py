"""`--reference ort-host`: the reference profile this machine's ONNX Runtime matches.

Probed once per process: a crafted uint8 x int8 MatMulInteger whose first pair of raw
products (255*127 + 255*127 = 64770) leaves int16 tells exact accumulation from MLAS's
pair saturation (`vpmaddubsw`, x86 without VNNI); `prover.mlas.host_uses_fma()` tells
which logistic/tanh kernel MLAS runs. Two rows and a non-zero activation zero point keep
the probe on the GEMM kernel (MLAS uses a GEMV kernel for one row with zero points 0).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from compiler.errors import CompilerError
from prover.pair_saturation import pair_saturating_acc
from prover.reference import (
    DEFAULT_PROFILE,
    HOST,
    PROFILES,
    Accumulation,
    ReferenceProfile,
    get_profile,
)

_A = np.array([[255, 255, 7, 0], [255, 255, 255, 255]], dtype=np.uint8)
_W = np.array([[127, -128], [127, -128], [3, 127], [1, 127]], dtype=np.int8)
_A_ZP = 1


def _probe_model() -> onnx.ModelProto:
    node = helper.make_node("MatMulInteger", ["a", "w", "a_zp"], ["y"])
    g = helper.make_graph(
        [node],
        "reference_probe",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, list(_A.shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [_A.shape[0], _W.shape[1]])],
        [
            numpy_helper.from_array(_W, "w"),
            numpy_helper.from_array(np.array(_A_ZP, dtype=np.uint8), "a_zp"),
        ],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def probe_u8s8_accumulation() -> Accumulation:
    """How this machine's ONNX Runtime sums uint8 x int8 products (runs ORT once)."""
    from .tables import session

    sess = session(_probe_model())
    got = np.asarray(sess.run(None, {"a": _A})[0], dtype=np.int64)
    a64, w64 = _A.astype(np.int64), _W.astype(np.int64)
    exact = (a64 - _A_ZP) @ w64
    saturating = pair_saturating_acc(a64, w64, _A_ZP, 0)
    if np.array_equal(got, exact):
        return Accumulation.EXACT
    if np.array_equal(got, saturating):
        return Accumulation.PAIR_SATURATING_INT16
    raise CompilerError(
        f"ONNX Runtime's uint8 x int8 MatMulInteger on this host gives {got.tolist()}: "
        f"neither exact ({exact.tolist()}) nor pair-saturating ({saturating.tolist()})"
    )


@lru_cache(maxsize=1)
def host_profile() -> ReferenceProfile:
    """The profile this machine's ONNX Runtime matches, named `ort-host=<profile>`."""
    from prover.mlas import host_uses_fma

    acc, fma = probe_u8s8_accumulation(), host_uses_fma()
    for p in PROFILES.values():
        if p.u8s8_accumulation == acc and p.mlas_fma == fma:
            return dataclasses.replace(p, name=f"{HOST}={p.name}")
    return ReferenceProfile(
        name=f"{HOST}=custom",
        u8s8_accumulation=acc,
        mlas_fma=fma,
        summary=f"this host's ONNX Runtime: u8s8 accumulation {acc}, MLAS FMA kernels {fma}",
    )


def resolve_reference(name: str | ReferenceProfile | None) -> ReferenceProfile:
    """A profile by name (`ort-host` probes this machine); ValueError on an unknown name."""
    if isinstance(name, ReferenceProfile):
        return name
    if name is None:
        name = DEFAULT_PROFILE
    if name == HOST:
        return host_profile()
    return get_profile(name)


def same_semantics(a: ReferenceProfile, b: ReferenceProfile) -> bool:
    """Whether two profiles compute the same results (names aside)."""
    return a.u8s8_accumulation == b.u8s8_accumulation and a.mlas_fma == b.mlas_fma
