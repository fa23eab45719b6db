"""The plain data every `prover check` / `npuc compile` report is rendered from.

The report writers (text, JSON, SARIF, JUnit) only see these dataclasses, never the
compiler's or the prover's objects; `compiler.report_adapt` builds them from a
compile result. Exit codes are decided here, once, from the verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

import numpy as np


class Verdict(StrEnum):
    """Per-site verdict (DESIGN.md "Verdicts")."""

    PROVEN = "proven"
    REFUTED = "refuted"
    UNKNOWN = "unknown"
    REJECTED = "rejected"


class ExitCode(IntEnum):
    """Exit codes of `prover check` and `npuc` (DESIGN.md "Commands and exit codes")."""

    OK = 0
    REFUTED = 1
    BAD_INPUT = 2
    UNKNOWN = 3
    INTERNAL = 4
    PROOF_MISSING = 5  # read-only gate: an obligation has no record that could be trusted


# Stable reason codes (DESIGN.md) with a one-line description, used as SARIF rules.
REASON_CODES: dict[str, str] = {
    "not_adjacent": "The activation's input is not produced directly by the compute op.",
    "intervening_requantize": "A requantize between them that the target postprocessing cannot reproduce.",
    "intervening_clip": "A clip between them that cannot be absorbed.",
    "multiple_users": "The compute result is also used elsewhere.",
    "already_fused": "The producer already carries a postprocessing function.",
    "unsupported_function": "This compute path does not support this activation on this target.",
    "unsupported_intermediate_type": "The intermediate storage type is not supported.",
    "layout_mismatch": "Element correspondence or memory layout differs (e.g. a hidden transpose).",
    "incomplete_parameters": "LUT, table address, header, encodings or enable flag missing.",
    "grouped_codegen_unsupported": "The chosen scheduling structure cannot generate the fused op.",
    "buffers_exceed_memory": "The op's buffers do not fit the target's memories at once; it stays on the host.",
    "unsupported_op": "An op the NPU cannot run; it stays on the host (the rest of the model is still checked).",
    "refuted": "The prover found an input on which the results differ.",
    "unknown": "The prover could not decide within its budget.",
    "reference_divergence": "The host's ONNX Runtime can differ from the named reference on a reachable input.",
    "float_accumulation": "A QDQ float op whose result depends on float summation order, under a float reference.",
}


@dataclass(frozen=True)
class Reason:
    """Why a site is not proven: a stable code and a message naming nodes and remedies."""

    code: str
    message: str
    action: str = ""  # what the user can do (compiler.ir.site.ACTIONS)


@dataclass
class Counterexample:
    """A whole-model input on which the original graph and the fused program differ.

    `inputs`, `expected` (original graph under ONNX Runtime) and `actual` (the fused
    program) are keyed by ONNX graph input/output names. `local` holds the free
    variables of the obligation (e.g. {"acc": 1234}) with `before`/`after` values.
    """

    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    expected: dict[str, np.ndarray] = field(default_factory=dict)
    actual: dict[str, np.ndarray] = field(default_factory=dict)
    local: dict[str, int] = field(default_factory=dict)
    before: int | None = None
    after: int | None = None
    npz: str | None = None

    def differing(self) -> list[tuple[str, tuple[int, ...], int, int]]:
        """(output, index, expected, actual) of every differing element, first ones first."""
        out = []
        for name, exp in self.expected.items():
            act = self.actual.get(name)
            if act is None or np.shape(act) != np.shape(exp):
                continue
            exp_a, act_a = np.asarray(exp), np.asarray(act)
            for idx in zip(*np.nonzero(exp_a != act_a), strict=True):
                out.append((name, tuple(int(i) for i in idx), exp_a[idx].item(), act_a[idx].item()))
        return out


@dataclass
class SiteReport:
    """One candidate site and its verdict."""

    id: str
    pattern: str
    nodes: tuple[str, ...]
    verdict: Verdict
    reason: Reason | None = None
    time_ms: float = 0.0
    counterexample: Counterexample | None = None
    obligation_hash: str | None = None
    solver: str | None = None
    max_diff: int | None = None
    ledger: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.verdict = Verdict(self.verdict)
        self.nodes = tuple(self.nodes)
        if self.verdict is not Verdict.PROVEN and self.reason is None:
            code = self.verdict.value if self.verdict is not Verdict.REJECTED else "rejected"
            self.reason = Reason(code, f"site {self.id} was {self.verdict.value}")


@dataclass(frozen=True)
class Summary:
    """Counts per verdict."""

    candidates: int
    proven: int
    refuted: int
    unknown: int
    rejected: int


@dataclass
class Report:
    """The result of checking one model: the sites and where they came from."""

    model: str
    policy: str
    target: str
    sites: list[SiteReport]
    tool_version: str = ""
    ledger: dict[str, Any] | None = None
    # Per proof record served from the store: {"obligation", "record", "served"}
    # where "served" says how it was checked ("re-decided by ...", "replayed", ...).
    proof_records: list[dict[str, str]] = field(default_factory=list)
    # Read-only gate: one line per obligation without a trusted record (exit 5).
    proof_misses: list[str] = field(default_factory=list)
    reference: dict[str, Any] | None = (
        None  # the named reference profile (ReferenceProfile.to_dict)
    )
    findings: list[dict[str, Any]] = field(default_factory=list)  # e.g. reference_divergence
    # ONNX ops kept on the host: {"code", "nodes", "message", "action"} (unsupported_op, ...)
    host_ops: list[dict[str, Any]] = field(default_factory=list)

    @property
    def summary(self) -> Summary:
        """Counts of sites per verdict."""
        count = {v: 0 for v in Verdict}
        for s in self.sites:
            count[s.verdict] += 1
        return Summary(
            candidates=len(self.sites),
            proven=count[Verdict.PROVEN],
            refuted=count[Verdict.REFUTED],
            unknown=count[Verdict.UNKNOWN],
            rejected=count[Verdict.REJECTED],
        )

    def exit_code(self) -> ExitCode:
        """1 if anything is refuted, else 5 on a proof-gate miss, else 3 if unknown, else 0."""
        s = self.summary
        if s.refuted:
            return ExitCode.REFUTED
        if self.proof_misses:
            return ExitCode.PROOF_MISSING
        if s.unknown:
            return ExitCode.UNKNOWN
        return ExitCode.OK


def arrays(m: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    """Copy a name -> array-like mapping into numpy arrays (None -> {})."""
    return {str(k): np.asarray(v) for k, v in (m or {}).items()}


def sites_by_verdict(sites: Sequence[SiteReport], verdict: Verdict) -> list[SiteReport]:
    """The sites with one verdict, in report order."""
    return [s for s in sites if s.verdict is verdict]
