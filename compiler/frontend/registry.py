"""The frontend's converter registry: one converter per (domain, op type, opset versions).

A converter is a function `fn(ctx, node)` that reads one ONNX node into the IR through the
builder context (`compiler.frontend.context.BuildContext`). It is registered with

    @converter("", "QLinearMatMul", since=10)
    def qlinear_matmul(ctx, n): ...

for the opset versions `since`..`until` (inclusive) of its domain; `until` defaults to the
newest version of that domain whose op schemas the converters were read against
(`NEWEST_READ`). Lookup takes the model's opset import for the node's domain and picks the
converter whose range contains it, as ONNX Runtime's kernel registry matches a kernel's
since-version range. An op with no converter, or a version no converter claims, runs on the
host (the dispatcher, `compiler.frontend.reader`, reports it as `unsupported_op` with
`unclaimed_reason`). Two converters whose ranges overlap for one (domain, op) are an error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from compiler.errors import InternalError

from .f16_context import PROJECT_DOMAIN

MS_DOMAIN = "com.microsoft"
ML_DOMAIN = "ai.onnx.ml"
KNOWN_DOMAINS = ("", "ai.onnx", MS_DOMAIN, PROJECT_DOMAIN, ML_DOMAIN)

# The newest opset version per domain whose op schemas (attributes and inputs per version)
# the converters were checked against: ai.onnx 28 is onnx 1.23's newest; com.microsoft and
# the project domain have version 1 only. Raising a number means reading every registered
# op's schema at the new version first (a version that only adds element types is claimed
# as it is: converters check element types themselves).
NEWEST_READ: dict[str, int] = {"": 28, MS_DOMAIN: 1, PROJECT_DOMAIN: 1}

ConvertFn = Callable[[Any, Any], None]  # (BuildContext, onnx.NodeProto) -> None


class DuplicateConverter(InternalError):
    """Two converters claim one opset version of the same (domain, op): a bug in the tool,
    raised when the second one's module is imported."""


def canonical_domain(domain: str) -> str:
    """ONNX's default domain is spelled "" or "ai.onnx"; the registry keys it as ""."""
    return "" if domain in ("", "ai.onnx") else domain


def opset_version(opsets: Mapping[str, int], domain: str) -> int:
    """The model's opset import for `domain` (0 when it imports none)."""
    d = canonical_domain(domain)
    if d == "":
        return int(opsets.get("", opsets.get("ai.onnx", 0)))
    return int(opsets.get(d, 0))


@dataclass(frozen=True)
class Converter:
    """One registered converter and the versions it claims.

    `attributes`: the attributes the converter interprets itself (any other one is an error
    naming it); None when ONNX Runtime interprets them (the node runs on the host).
    `host_fallback`: a form the converter rejects (a `FrontendError` that is not bad input)
    is still a valid op; it runs on the host when ONNX Runtime accepts it.
    """

    domain: str
    op_type: str
    since: int
    until: int
    fn: ConvertFn
    attributes: frozenset[str] | None = None
    host_fallback: bool = False

    def claims(self, version: int) -> bool:
        return self.since <= version <= self.until

    def versions(self) -> str:
        return str(self.since) if self.since == self.until else f"{self.since}-{self.until}"


class Registry:
    """Converters by (canonical domain, op type), each with a disjoint version range."""

    def __init__(self) -> None:
        self._by_op: dict[tuple[str, str], list[Converter]] = {}
        self.attributes: dict[str, frozenset[str]] = {}  # op type -> interpreted attributes

    def register(self, c: Converter) -> None:
        if c.since < 1 or c.until < c.since:
            raise ValueError(f"{c.op_type}: bad opset range {c.since}..{c.until}")
        have = self._by_op.setdefault((c.domain, c.op_type), [])
        for old in have:
            if c.since <= old.until and old.since <= c.until:
                raise DuplicateConverter(
                    f"{c.op_type} (domain '{c.domain or 'ai.onnx'}') opsets {c.versions()}: "
                    f"{old.fn.__qualname__} already claims {old.versions()}"
                )
        have.append(c)
        have.sort(key=lambda x: x.since)
        if c.attributes is not None:
            self.attributes[c.op_type] = self.attributes.get(c.op_type, frozenset()) | c.attributes

    def converter(
        self,
        domain: str,
        op_type: str,
        *,
        since: int,
        until: int | None = None,
        attributes: tuple[str, ...] | frozenset[str] | None = None,
        host_fallback: bool = False,
    ) -> Callable[[ConvertFn], ConvertFn]:
        """Decorator registering `fn` for opsets `since`..`until` (default `NEWEST_READ`)."""
        d = canonical_domain(domain)
        if until is None:
            if d not in NEWEST_READ:
                raise ValueError(f"{op_type}: give `until` for domain '{d}'")
            until = NEWEST_READ[d]
        attrs = None if attributes is None else frozenset(attributes)
        last = until

        def register(fn: ConvertFn) -> ConvertFn:
            self.register(Converter(d, op_type, since, last, fn, attrs, host_fallback))
            return fn

        return register

    def known(self, domain: str, op_type: str) -> tuple[Converter, ...]:
        """Every converter registered for (domain, op), oldest range first."""
        return tuple(self._by_op.get((canonical_domain(domain), op_type), ()))

    def lookup(self, domain: str, op_type: str, version: int) -> Converter | None:
        """The converter claiming opset `version` of (domain, op), or None."""
        return next((c for c in self.known(domain, op_type) if c.claims(version)), None)

    def unclaimed_reason(self, domain: str, op_type: str, version: int) -> str:
        """Why (domain, op) at `version` has no converter, naming the op and the version."""
        d = canonical_domain(domain)
        where = f"domain '{d or 'ai.onnx'}', opset {version}"
        have = self.known(d, op_type)
        if not have:
            return f"{op_type} ({where}) has no NPU form"
        claimed = ", ".join(c.versions() for c in have)
        return f"{op_type} ({where}) has no converter for this version (converters: {claimed})"


REGISTRY = Registry()
converter = REGISTRY.converter
