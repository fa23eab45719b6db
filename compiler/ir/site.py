"""Candidate fusion sites, their verdicts and diagnostics (what the report shows per site)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prover.verdict import Counterexample, ReasonCode, Status

from .float_bias import FloatBias
from .graph import Node
from .reasons import ACTIONS, Reason

__all__ = ["ACTIONS", "Diagnostic", "Reason", "Site", "WholeModelCounterexample"]


@dataclass(kw_only=True)
class WholeModelCounterexample:
    """A refutation replayed on the whole model: the one counterexample type of the compiler.

    It *contains* the prover's `Counterexample` (`local`: the obligation's assignment,
    `before`/`after`, the lifted row) and adds what only the whole model has: the graph
    inputs, both models' outputs, the output element that differs and where the data
    was saved. Two types because the prover knows nothing of ONNX graphs; never two
    parallel ones: `assignment`, `before` and `after` are read from `local`.
    """

    local: Counterexample
    inputs: dict[str, np.ndarray] | None = None  # whole-model inputs (None: not liftable)
    expected: dict[str, np.ndarray] | None = None  # original model (ORT, or the IR reference)
    actual: dict[str, np.ndarray] | None = None  # fused form outputs
    element: dict[str, Any] = field(default_factory=dict)  # {"value": name, "index": [...]}
    expected_by: str = ""  # "onnxruntime" or "ir-reference"
    actual_by: str = ""  # "kernel" (+ "simulator" when checked)
    note: str = ""
    npz: str | None = None  # where `--emit-tests` saved the arrays

    @property
    def assignment(self) -> Mapping[str, int]:
        """Free-variable assignment of the refuted obligation (e.g. {"acc": 1250})."""
        return self.local.assignment

    @property
    def before(self) -> int:
        return int(self.local.before)

    @property
    def after(self) -> int | None:
        """The fused value; None where an NPU-side precondition fails (no value exists)."""
        return None if self.local.after is None else int(self.local.after)

    def differing(self) -> list[tuple[str, tuple[int, ...], int, int]]:
        """(output, index, expected, actual) of every differing element, first ones first."""
        out = []
        actual = self.actual or {}
        for name, exp in (self.expected or {}).items():
            act = actual.get(name)
            if act is None or np.shape(act) != np.shape(exp):
                continue
            exp_a, act_a = np.asarray(exp), np.asarray(act)
            for idx in zip(*np.nonzero(exp_a != act_a), strict=True):
                out.append((name, tuple(int(i) for i in idx), exp_a[idx].item(), act_a[idx].item()))
        return out


@dataclass(kw_only=True)
class Site:
    """One candidate fusion: a compute op, the chain after it, and the activation it ends in."""

    id: str
    pattern: str
    compute: Node
    chain: list[Node]
    verdict: Status | None = None
    reason: Reason | None = None
    time_ms: float = 0.0
    counterexample: WholeModelCounterexample | None = None
    obligations: list[str] = field(default_factory=list)
    # obligations the verdict does not rest on (`compiler.proving.fixed_synthesis`): the
    # rounded parameters a proven synthesised group replaced, the refuted groups of a site
    # rejected for an intermediate type the NPU lacks. Never reported, so never lifted and
    # never stored: the read-only gate does not ask for their records.
    unrelied: list[str] = field(default_factory=list)
    post: Any = None  # npu_backend PostProcess (or per-column tuple) of the fused form
    max_diff: int | None = None
    index_map: bool = False  # an index-map obligation was needed (unit dims)
    applied: bool = False
    details: list[dict[str, Any]] = field(default_factory=list)
    obligation_hash: str | None = None  # the deciding obligation (the refuted one, else the first)
    solver: str | None = None
    ledger: Any = None
    # ORT's float bias group when it is in the chain (set by legality)
    float_bias: FloatBias | None = None

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

    def decide(
        self, verdict: Status | str, code: ReasonCode | str | None = None, message: str = ""
    ) -> None:
        """Record the verdict and, where not proven, its reason (strings are checked)."""
        self.verdict = Status(verdict)
        self.reason = None if code is None else Reason(ReasonCode(code), message)


@dataclass
class Diagnostic:
    """A lowering decision the user should know about (an op kept on the host, ...)."""

    code: ReasonCode
    nodes: list[str]
    message: str
    action: str = ""  # empty: the code's action (`compiler.ir.reasons`)

    def __post_init__(self) -> None:
        self.code = ReasonCode(self.code)
        self.nodes = [str(n) for n in self.nodes]
        if not self.action:
            self.action = ACTIONS[self.code]

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code.value,
            "nodes": self.nodes,
            "message": self.message,
            "action": self.action,
        }
