"""Candidate fusion sites, their verdicts and diagnostics (what the report shows per site)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .graph import Node

# What the user can do, per reason code (DESIGN.md reason codes).
ACTIONS = {
    "not_adjacent": "keep the original; move the op between them out of the chain to enable fusion",
    "intervening_requantize": "keep the original, or fold the requantize into the compute op's own scale",
    "intervening_clip": "keep the original, or move the clip after the requantization",
    "multiple_users": "keep the original; fuse only where the compute result has a single user",
    "already_fused": "keep the original; enable table composition (compose_tables) to fuse both as one proven table",
    "unsupported_function": "keep the activation standalone, or choose a target that supports it on this compute path",
    "unsupported_intermediate_type": "keep the original, or requantize to a type the target supports",
    "layout_mismatch": "keep the original; remove the transpose/permuting reshape between the ops",
    "incomplete_parameters": "keep the original; supply the missing quantization parameters or table",
    "grouped_codegen_unsupported": "change grouping: schedule this compute op as a structure the target can fuse ('plain')",
    "refuted": "keep the original, disable this fusion, or use a looser policy (bounded:N) if acceptable",
    "unknown": "keep the original; raise --timeout or try another --solver",
    "reference_divergence": "keep the matmul on the host, or quantize with reduce_range=True "
    "(7-bit weights) or as int8 x int8 / uint8 x uint8 so no int16 pair can saturate",
    "float_accumulation": "keep the QDQ group on the host, or check under a reference that reads "
    "QDQ groups as integer kernels (--reference onnx, the default) so the group is an integer "
    "MatMul with a provable epilogue",
    "buffers_exceed_memory": "keep it on the host, or choose a target with larger memories",
    "unsupported_op": "keep it on the host (ONNX Runtime runs it); to move it to the NPU, "
    "replace it by an op the target supports or choose a target that supports it",
}


@dataclass
class Reason:
    code: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(kw_only=True)
class WholeModelCounterexample:
    """A refutation replayed on the whole model."""

    inputs: dict[str, np.ndarray] | None  # whole-model inputs (None when not liftable)
    expected: (
        dict[str, np.ndarray] | None
    )  # original model outputs (ONNX Runtime, or the IR reference)
    actual: dict[str, np.ndarray] | None  # fused form outputs
    assignment: dict[str, int]  # free-variable assignment of the refuted obligation
    before: int
    after: int
    element: dict[str, Any] = field(default_factory=dict)  # {"value": name, "index": [...]}
    expected_by: str = ""  # "onnxruntime" or "ir-reference"
    actual_by: str = ""  # "kernel" (+ "simulator" when checked)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        def arr(d):
            return None if d is None else {k: np.asarray(v).tolist() for k, v in d.items()}

        return {
            "inputs": arr(self.inputs),
            "expected": arr(self.expected),
            "actual": arr(self.actual),
            "assignment": dict(self.assignment),
            "before": self.before,
            "after": self.after,
            "element": self.element,
            "expected_by": self.expected_by,
            "actual_by": self.actual_by,
            "note": self.note,
        }


@dataclass(kw_only=True)
class Site:
    """One candidate fusion: a compute op, the chain after it, and the activation it ends in."""

    id: str
    pattern: str
    compute: Node
    chain: list[Node]
    verdict: str | None = None  # proven | refuted | unknown | rejected
    reason: Reason | None = None
    time_ms: float = 0.0
    counterexample: WholeModelCounterexample | None = None
    obligations: list[str] = field(default_factory=list)
    post: Any = None  # npu_backend PostProcess (or per-column tuple) of the fused form
    max_diff: int | None = None
    index_map: bool = False  # an index-map obligation was needed (unit dims)
    applied: bool = False
    details: list[dict[str, Any]] = field(default_factory=list)
    obligation_hash: str | None = None  # the deciding obligation (the refuted one, else the first)
    solver: str | None = None
    ledger: Any = None
    # compiler.frontend.float_bias.FloatBias when ORT's float bias group is in the chain
    float_bias: Any = None

    @property
    def activation(self) -> Node:
        return self.chain[-1]

    @property
    def nodes(self) -> list[str]:
        """ONNX node names covered by the site, in graph order."""
        out: list[str] = []
        for n in [self.compute, *self.chain]:
            for o in n.origin:
                if o not in out:
                    out.append(o)
        return out

    def decide(self, verdict: str, code: str | None = None, message: str = "") -> None:
        self.verdict = verdict
        self.reason = None if code is None else Reason(code, message)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pattern": self.pattern,
            "nodes": self.nodes,
            "verdict": self.verdict,
            "reason": None if self.reason is None else self.reason.to_dict(),
            "action": None if self.reason is None else ACTIONS.get(self.reason.code, ""),
            "time_ms": round(self.time_ms, 3),
            "counterexample": None
            if self.counterexample is None
            else self.counterexample.to_dict(),
            "obligations": list(self.obligations),
            "obligation_hash": self.obligation_hash,
            "solver": self.solver,
            "max_diff": self.max_diff,
            "applied": self.applied,
        }


@dataclass
class Diagnostic:
    """A lowering decision the user should know about (an op kept on the host, ...)."""

    code: str
    nodes: list[str]
    message: str
    action: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "nodes": self.nodes,
            "message": self.message,
            "action": self.action,
        }
