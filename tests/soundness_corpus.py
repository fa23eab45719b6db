"""The model corpus of the soundness tests: every example model and a spread of test builders.

`corpus()` maps a stable name to an ONNX model (path or ModelProto); `compile_recording`
compiles one under a target and policy and returns the compile result together with every
obligation the compiler asked the prover about (recorded through the proof-store hook,
so the compiler's own code path is unchanged; a column family of identities is recorded as
its members, so the procedures are checked to agree with the identity on each of them).
"""

from __future__ import annotations

import dataclasses
from functools import cache
from pathlib import Path
from typing import Any

import models as M

from compiler.api import compile_model
from npu_backend.target import load_target, shipped_targets
from prover.family import Family
from prover.obligation import Obligation
from prover.proofstore import ProofStore

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

BUILDER_VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "per_channel": {"per_channel": True},
    "integer_requantize": {"form": "integer"},
    "clip": {"clip": (-20, 90)},
    "double_activation": {"double_activation": True},
    "unit_reshape": {"reshape": "unit"},
    "noop_reshape": {"reshape": "noop"},
    "transpose": {"transpose": [1, 0]},
    "float_input": {"float_input": True},
    "qdq_tanh": {"act_form": "qdq", "activation": "tanh"},
    "qdq_relu": {"act_form": "qdq", "activation": "relu"},
    "uint8": {"inter_type": "uint8", "y_zp": 128, "out_zp": 0},
    "wide_k": {"K": 256, "y_scale": 0.2},
    "extra_user": {"extra_user": "node"},
}


@cache
def corpus() -> dict[str, Any]:
    """name -> model (an example file path, or a builder's ModelProto)."""
    out: dict[str, Any] = {f"examples/{p.name}": str(p) for p in sorted(EXAMPLES.glob("*.onnx"))}
    for name, kw in BUILDER_VARIANTS.items():
        out[f"models.matmul_activation[{name}]"] = M.matmul_activation(**kw)
    out["models.two_sites"] = M.two_sites()
    return out


@cache
def targets() -> dict[str, Any]:
    """The shipped targets, plus `npu_fixed_rounded`: npu_fixed without its synthesis space
    (its rounded parameters' refutations, which synthesis now proves by default)."""
    out = {name: load_target(p) for name, p in shipped_targets().items()}
    fixed = out["npu_fixed"]
    caps = tuple(dataclasses.replace(c, synthesis=frozenset()) for c in fixed.computes)
    out["npu_fixed_rounded"] = dataclasses.replace(fixed, name="npu_fixed_rounded", computes=caps)
    return out


class RecordingStore(ProofStore):
    """A proof store that stores nothing and records every obligation asked about."""

    def __init__(self) -> None:
        super().__init__("recording-store-never-written", mode="off")
        self.obligations: dict[str, Obligation] = {}

    def lookup(self, ob: Obligation | Family):  # what prover.api.check asks the store
        if isinstance(ob, Family):  # a family of identities: each member, as decided alone
            for i in range(len(ob)):
                member = ob.column(i)
                self.obligations[member.hash] = member
            return None
        self.obligations[ob.hash] = ob
        return None

    def get(self, ob: Obligation):
        return self.lookup(ob)

    def put(self, ob: Obligation, v, extra=None):
        return None


def compile_recording(model: Any, target: str, policy: str = "bitwise"):
    """(compile result, {hash: obligation}) of one compile without a real proof store."""
    rec = RecordingStore()
    r = compile_model(model, policy, targets()[target], check_options={"store": rec})
    return r, rec.obligations
