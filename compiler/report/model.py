"""The plain data every `prover check` / `npuc compile` report is rendered from.

The report writers (text, JSON, SARIF, JUnit, Markdown, HTML) read a site only as a
`SiteReport`, built from a compiler `Site` by `SiteReport.of` (the one conversion);
verdicts, reason codes, reasons and counterexamples are the compiler's and the
prover's own types (`Status`, `ReasonCode`, `Reason`, `WholeModelCounterexample`).
Exit codes are decided here, once, from the verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import compiler.passes.legality  # noqa: F401 - registers the legality rules' reason texts
from compiler.ir.reasons import REASON_CODES, Reason
from compiler.ir.site import Diagnostic, Site, WholeModelCounterexample
from prover.verdict import ReasonCode, Status

__all__ = [
    "REASON_CODES",
    "Diagnostic",
    "ExitCode",
    "Reason",
    "ReasonCode",
    "Report",
    "SiteReport",
    "Status",
    "Summary",
    "WholeModelCounterexample",
]


class ExitCode(IntEnum):
    """Exit codes of `prover check` and `npuc` (DESIGN.md "Commands and exit codes")."""

    OK = 0
    REFUTED = 1
    BAD_INPUT = 2
    UNKNOWN = 3
    INTERNAL = 4
    PROOF_MISSING = 5  # read-only gate: an obligation has no record that could be trusted
    WORSE = 6  # --baseline: a verdict, placement, NPU share or check time got worse
    FLOAT_COMPUTE = 7  # --require-quantized / ro gate: a compute op runs in float on the host


@dataclass
class SiteReport:
    """One candidate site and its verdict."""

    id: str
    pattern: str
    nodes: tuple[str, ...]
    verdict: Status
    reason: Reason | None = None
    time_ms: float = 0.0
    counterexample: WholeModelCounterexample | None = None
    obligation_hash: str | None = None
    solver: str | None = None
    max_diff: int | None = None
    ledger: dict[str, Any] | None = None
    # per-site checks beside the obligations, e.g. tile_columns (compiler.passes.tile_columns)
    checks: tuple[dict[str, Any], ...] = ()

    def __post_init__(self) -> None:
        self.verdict = Status(self.verdict)
        self.nodes = tuple(self.nodes)
        if self.verdict is not Status.PROVEN and self.reason is None:
            if self.verdict is Status.REJECTED:
                raise ValueError(f"site {self.id}: a rejected site needs its reason code")
            code = ReasonCode(self.verdict.value)  # refuted / unknown are codes too
            self.reason = Reason(code, f"site {self.id} was {self.verdict.value}")

    @classmethod
    def of(cls, site: Site) -> SiteReport:
        """The report's view of a compiler `Site` (every writer reads sites this way)."""
        if site.verdict is None:
            raise ValueError(f"site {site.id} has no verdict")
        return cls(
            id=site.id,
            pattern=site.pattern,
            nodes=tuple(site.nodes),
            verdict=site.verdict,
            reason=site.reason,
            time_ms=float(site.time_ms),
            counterexample=site.counterexample,
            obligation_hash=site.obligation_hash,
            solver=site.solver,
            max_diff=None if site.max_diff is None else int(site.max_diff),
            ledger=site.ledger,
            checks=tuple(d for d in site.details if "check" in d),
        )


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
    # ONNX ops kept on the host (unsupported_op, lowering fallbacks), with their actions
    host_ops: list[Diagnostic] = field(default_factory=list)
    # multiply-accumulates of the model's compute ops: {"total": n, "npu": n run on the NPU}
    macs: dict[str, int] | None = None
    # --baseline: {"file": path, "changes": [compiler.zoo.baseline.Change.to_json(), ...]}
    baseline: dict[str, Any] | None = None
    # --require-quantized (or a read-only gate): a float_compute finding fails the check
    require_quantized: bool = False

    @property
    def float_compute(self) -> dict[str, Any] | None:
        """The `float_compute` finding (compute ops run in float on the host), if any."""
        return next((f for f in self.findings if f.get("code") == ReasonCode.FLOAT_COMPUTE), None)

    @property
    def summary(self) -> Summary:
        """Counts of sites per verdict."""
        count = {v: 0 for v in Status}
        for s in self.sites:
            count[s.verdict] += 1
        return Summary(
            candidates=len(self.sites),
            proven=count[Status.PROVEN],
            refuted=count[Status.REFUTED],
            unknown=count[Status.UNKNOWN],
            rejected=count[Status.REJECTED],
        )

    def exit_code(self) -> ExitCode:
        """1 if anything is refuted, else 5 on a proof-gate miss, else 3 if unknown, else 0."""
        s = self.summary
        if s.refuted:
            return ExitCode.REFUTED
        if self.proof_misses:
            return ExitCode.PROOF_MISSING
        if self.require_quantized and self.float_compute is not None:
            return ExitCode.FLOAT_COMPUTE
        if s.unknown:
            return ExitCode.UNKNOWN
        return ExitCode.OK
