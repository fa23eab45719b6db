"""Why a site is not fused, or an op not on the NPU: the text and the action of every code.

One place, as Arm's Vela documents its constraints: a legality rule is one function
registered with `@rule(ReasonCode.X, action=...)`, and its docstring is the text the
reports show for that code. Codes no rule produces (the gate's, the lowering's, the
frontend's) take their text and action from `OTHER_REASONS`. `REASON_CODES` (code ->
text) and `ACTIONS` (code -> action) are read-only views of both.

This registry imports no rule: the rules register themselves where they are defined
(`compiler.passes.legality`), and whoever needs every code's text imports that module at
its top level (`compiler.api` through the pipeline, `compiler.report.model`). Asking for
a rule's code before its module is imported is an `InternalError`, never a wrong text.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from compiler.errors import InternalError
from prover.verdict import ReasonCode


@dataclass(frozen=True)
class Reason:
    """Why a site is not proven: a stable code and a message naming the nodes."""

    code: ReasonCode
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", ReasonCode(self.code))

    @property
    def text(self) -> str:
        """What the code means (the rule's docstring, or `OTHER_REASONS`)."""
        return explain(self.code).text

    @property
    def action(self) -> str:
        """What the user can do about it."""
        return explain(self.code).action


@dataclass(frozen=True)
class Explanation:
    """The user-facing text of a reason code and what the user can do."""

    code: ReasonCode
    text: str
    action: str


# A rule returns None (the site passes), a message naming the nodes (rejected with the
# rule's code), or a `Reason` when the cause has its own code (the backend's validation).
RuleResult = str | Reason | None


@dataclass(frozen=True)
class Rule:
    """One structural legality rule: its code, the action, and the pure check."""

    code: ReasonCode
    action: str
    check: Callable[..., RuleResult]

    @property
    def name(self) -> str:
        return self.check.__name__

    @property
    def text(self) -> str:
        """The check's docstring as one paragraph: the user-facing reason."""
        return doc_text(self.check)


_RULES: dict[ReasonCode, Rule] = {}


def rule(code: ReasonCode, *, action: str) -> Callable[[Callable[..., RuleResult]], Callable]:
    """Register a legality rule for `code` (one rule per code; run in registration order)."""

    def register(fn: Callable[..., RuleResult]) -> Callable[..., RuleResult]:
        if not fn.__doc__:
            raise TypeError(f"legality rule {fn.__name__} needs a docstring (its reason text)")
        old = _RULES.get(code)
        if old is not None and old.check.__qualname__ != fn.__qualname__:
            raise ValueError(f"two legality rules for {code}: {old.name} and {fn.__name__}")
        _RULES[code] = Rule(ReasonCode(code), action, fn)
        return fn

    return register


def rules() -> list[Rule]:
    """The registered legality rules, in run order."""
    return list(_RULES.values())


def doc_text(fn: Callable) -> str:
    """A function's docstring as one line (how the reports show a rule's reason)."""
    return " ".join(inspect.cleandoc(fn.__doc__ or "").split())


# Codes that no legality rule produces: (text, action).
OTHER_REASONS: dict[ReasonCode, tuple[str, str]] = {
    ReasonCode.REFUTED: (
        "The prover found an input on which the results differ.",
        "keep the original, disable this fusion, or use a looser policy (bounded:N) if acceptable",
    ),
    ReasonCode.UNKNOWN: (
        "The prover could not decide within its budget.",
        "keep the original; raise --timeout or try another --solver",
    ),
    ReasonCode.PROOF_MISSING: (
        "The read-only proof gate found no trusted record for this obligation in the store, "
        "so it was not decided here (ro mode decides nothing new).",
        "record the proofs: run prover check MODEL --proofs DIR (rw, without --proofs-mode ro) "
        "and commit the new records to the store",
    ),
    ReasonCode.REFERENCE_DIVERGENCE: (
        "The host's ONNX Runtime can differ from the named reference on a reachable input.",
        "keep the matmul on the host, or quantize with reduce_range=True "
        "(7-bit weights) or as int8 x int8 / uint8 x uint8 so no int16 pair can saturate",
    ),
    ReasonCode.FLOAT_ACCUMULATION: (
        "A QDQ float op whose result depends on float summation order, under a float reference.",
        "keep the QDQ group on the host, or check under a reference that reads "
        "QDQ groups as integer kernels (--reference onnx, the default) so the group is an integer "
        "MatMul with a provable epilogue",
    ),
    ReasonCode.FLOAT_COMPUTE: (
        "A compute op (MatMul, Gemm, Conv, ...) runs in float on the host: that part of the "
        "model is not quantized, so nothing about it is checked.",
        "quantize the model first (onnxruntime.quantization.quantize_static, or "
        "quantize_dynamic), then check the quantized model; --require-quantized makes this an error",
    ),
    ReasonCode.BUFFERS_EXCEED_MEMORY: (
        "The op's buffers do not fit the target's memories at once; it stays on the host.",
        "keep it on the host, or choose a target with larger memories",
    ),
    ReasonCode.UNSUPPORTED_CONV_WINDOW: (
        "A convolution whose kernel size, strides, dilations or groups the target's Conv "
        "unit does not compute (its window_* lists); it stays on the host.",
        "keep it on the host, or choose a target whose [compute.Conv] lists this kernel, "
        "stride, dilation and group kind",
    ),
    ReasonCode.UNSUPPORTED_ELTWISE: (
        "A QLinearAdd or QLinearMul of two activations whose op, operand type or operand "
        "shapes (same, inner or outer broadcasting) the target's elementwise unit does not "
        "compute (its `[eltwise]` table); it stays on the host.",
        "keep it on the host, or choose a target whose [eltwise] lists this op, type and "
        "broadcast kind",
    ),
    ReasonCode.UNSUPPORTED_OP: (
        "An op the NPU cannot run; it stays on the host (the rest of the model is still checked).",
        "keep it on the host (ONNX Runtime runs it); to move it to the NPU, "
        "replace it by an op the target supports or choose a target that supports it",
    ),
}


def explain(code: ReasonCode | str) -> Explanation:
    """The text and action of a reason code (a ValueError for a code DESIGN.md lacks)."""
    c = ReasonCode(code)
    r = _RULES.get(c)
    if r is not None:
        return Explanation(c, r.text, r.action)
    if c not in OTHER_REASONS:
        raise InternalError(
            f"reason code {c.value} has no text: its legality rule is not registered "
            "(import compiler.passes.legality first)"
        )
    text, action = OTHER_REASONS[c]
    return Explanation(c, text, action)


class _View(Mapping[str, str]):
    """A read-only code -> str mapping computed from `explain` (unknown codes: KeyError)."""

    def __init__(self, field: str) -> None:
        self._field = field

    def __getitem__(self, code: str) -> str:
        try:
            c = ReasonCode(code)
        except ValueError:
            raise KeyError(code) from None
        return str(getattr(explain(c), self._field))

    def __iter__(self) -> Iterator[str]:
        return iter(c.value for c in ReasonCode)

    def __len__(self) -> int:
        return len(ReasonCode)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._field}: {dict(self)!r})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Mapping) and dict(self) == dict(other)

    __hash__ = None  # type: ignore[assignment]


REASON_CODES: Mapping[str, str] = _View("text")
ACTIONS: Mapping[str, str] = _View("action")
