"""Verdicts and counterexamples: the prover's answers, JSON-serialisable."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .policy import Policy


class Status(StrEnum):
    """A verdict (DESIGN.md "Verdicts"): one enum for the prover, the compiler and every report.

    The prover answers `proven`, `refuted` or `unknown` (never a pass); `rejected` is a
    site refused by a structural rule before any obligation, so a prover `Verdict`
    never carries it.
    """

    PROVEN = "proven"
    REFUTED = "refuted"
    UNKNOWN = "unknown"
    REJECTED = "rejected"


PROVER_STATUSES = (Status.PROVEN, Status.REFUTED, Status.UNKNOWN)


class ReasonCode(StrEnum):
    """The stable reason codes of DESIGN.md, why a site or an op is not (fully) on the NPU.

    Defined here, at the bottom of the dependency order, so the backend's validation and
    the compiler produce the same values; the user-facing text and action of each code
    live in `compiler.ir.reasons` (a legality rule's docstring, or a small table).
    """

    NOT_ADJACENT = "not_adjacent"
    INTERVENING_REQUANTIZE = "intervening_requantize"
    INTERVENING_CLIP = "intervening_clip"
    MULTIPLE_USERS = "multiple_users"
    ALREADY_FUSED = "already_fused"
    UNSUPPORTED_FUNCTION = "unsupported_function"
    UNSUPPORTED_INTERMEDIATE_TYPE = "unsupported_intermediate_type"
    LAYOUT_MISMATCH = "layout_mismatch"
    INCOMPLETE_PARAMETERS = "incomplete_parameters"
    GROUPED_CODEGEN_UNSUPPORTED = "grouped_codegen_unsupported"
    REFUTED = "refuted"
    UNKNOWN = "unknown"
    REFERENCE_DIVERGENCE = "reference_divergence"
    FLOAT_ACCUMULATION = "float_accumulation"
    UNSUPPORTED_OP = "unsupported_op"
    BUFFERS_EXCEED_MEMORY = "buffers_exceed_memory"  # lowering: kept on the host
    FLOAT_COMPUTE = "float_compute"  # a compute op runs in float: the model is not quantized
    PROOF_MISSING = "proof_missing"  # read-only gate: no trusted record (never decided here)
    # unary regions (compiler.frontend.ops.unary_region): why a region is not one table
    REGION_SECOND_INPUT = "region_second_input"
    REGION_REDUCTION = "region_reduction"
    REGION_POSITION_DEPENDENT = "region_position_dependent"
    UNSUPPORTED_CONV_WINDOW = "unsupported_conv_window"  # a conv window the unit lacks
    UNSUPPORTED_ELTWISE = "unsupported_eltwise"  # a two-input op/type/shape the unit lacks


@dataclass(frozen=True)
class Counterexample:
    """An input on which `before` and `after` differ beyond the policy (replayed).

    `before`/`after` are ints (tuples of ints for several outputs). `lifted_input`
    is a whole input row of the compute op producing `assignment[lift.var]`,
    or None when the obligation has no LiftSpec (or no row reaches that value,
    explained in `lift_note`). `undefined` names the implementation-side
    precondition that fails at the input (e.g. a fixed-point left shift
    overflowing int32); then the implementation has no result there, and
    `after` and `diff` are None.
    """

    assignment: Mapping[str, int]
    before: Any
    after: Any
    diff: int | None
    lifted_input: tuple[int, ...] | None = None
    lift_note: str = ""
    undefined: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = {
            "assignment": dict(self.assignment),
            "before": _jsonable(self.before),
            "after": None if self.after is None else _jsonable(self.after),
            "diff": self.diff,
            "lifted_input": None if self.lifted_input is None else list(self.lifted_input),
            "lift_note": self.lift_note,
        }
        if self.undefined:  # absent otherwise, so older records keep their bytes
            out["undefined"] = self.undefined
        return out

    @classmethod
    def from_dict(cls, j: Mapping[str, Any]) -> Counterexample:
        li = j.get("lifted_input")
        return cls(
            {k: int(v) for k, v in j["assignment"].items()},
            _unjson(j["before"]),
            None if j["after"] is None else _unjson(j["after"]),
            None if j["diff"] is None else int(j["diff"]),
            None if li is None else tuple(int(v) for v in li),
            j.get("lift_note", ""),
            j.get("undefined", ""),
        )


@dataclass(frozen=True)
class Verdict:
    """The answer to one obligation. `unknown` is never a pass."""

    status: Status  # a str is accepted and converted; never REJECTED
    policy: Policy
    obligation_hash: str
    solver: str
    time_ms: float
    max_diff: int | None = None
    counterexample: Counterexample | None = None
    reason: str = ""
    cached: bool = False
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            status = Status(self.status)
        except ValueError:
            status = None
        if status not in PROVER_STATUSES:
            known = ", ".join(PROVER_STATUSES)
            raise ValueError(f"bad verdict status {self.status!r}; known: {known}")
        object.__setattr__(self, "status", status)
        if (self.status is Status.REFUTED) != (self.counterexample is not None):
            raise ValueError("a refuted verdict needs a counterexample, and only it has one")

    @property
    def proven(self) -> bool:
        return self.status is Status.PROVEN

    @property
    def refuted(self) -> bool:
        return self.status is Status.REFUTED

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "policy": str(self.policy),
            "obligation_hash": self.obligation_hash,
            "solver": self.solver,
            "time_ms": round(float(self.time_ms), 3),
            "max_diff": self.max_diff,
            "counterexample": None
            if self.counterexample is None
            else self.counterexample.to_dict(),
            "reason": self.reason,
            "cached": self.cached,
            "details": dict(self.details),
        }

    @classmethod
    def from_dict(cls, j: Mapping[str, Any]) -> Verdict:
        cex = j.get("counterexample")
        return cls(
            status=j["status"],
            policy=Policy.parse(j["policy"]),
            obligation_hash=j["obligation_hash"],
            solver=j["solver"],
            time_ms=float(j["time_ms"]),
            max_diff=j.get("max_diff"),
            counterexample=None if cex is None else Counterexample.from_dict(cex),
            reason=j.get("reason", ""),
            cached=bool(j.get("cached", False)),
            details=dict(j.get("details", {})),
        )


def _jsonable(v: Any) -> Any:
    return [int(x) for x in v] if isinstance(v, tuple | list) else int(v)


def _unjson(v: Any) -> Any:
    return tuple(int(x) for x in v) if isinstance(v, list) else int(v)
