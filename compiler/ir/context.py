"""The state the passes share: target, policy, prover options, sites and diagnostics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import onnx

from .graph import Graph
from .site import Diagnostic, Site


@dataclass(kw_only=True)
class Context:
    target: Any  # npu_backend.target.Target
    policy: Any  # prover.policy.Policy
    reference: Any = None  # prover.reference.ReferenceProfile; None = the default (onnx)
    timeout_s: float = 10.0
    solver: str = "auto"
    store: Any = None  # prover.proofstore.ProofStore or None
    cross_check: bool = False
    jobs: int = 1  # worker processes deciding obligations (see prover.parallel)
    compose_tables: bool = False
    # Where rounding a scale is refuted, synthesise fixed-point parameters in the target's
    # declared space (`[compute.*] synthesis`, compiler.passes.fixed_synthesis).
    synthesis: bool = False
    schedule: dict[str, str] = field(default_factory=dict)  # ONNX compute node name -> structure
    model: onnx.ModelProto | None = None  # the validated original model (replay reference)
    original: Graph | None = None  # the IR straight from the frontend
    sites: list[Site] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)  # reference_divergence, ...
    verdicts: dict[str, Any] = field(default_factory=dict)  # obligation hash -> Verdict
    progress: Callable[[int, int], None] | None = None
    lowered: Any = None
    log: list[str] = field(default_factory=list)

    def structure_of(self, origin: tuple[str, ...]) -> str:
        for name in origin:
            if name in self.schedule:
                return self.schedule[name]
        return "plain"
