"""What the passes share: a frozen configuration and an explicit pipeline state.

`CompileConfig` is built (and its policy, target and reference normalised) once, by
`CompileConfig.build`, before any pass runs; nothing changes it afterwards.
`PipelineState` is what the passes hand on to each other beside the IR: the sites,
diagnostics, findings, decided verdicts (by obligation hash), the obligations built per
site, the lowered model and the log. `Context` pairs the two; passes receive it and
read `ctx.config.<field>` / `ctx.state.<field>` (the flat attribute names, `ctx.target`,
`ctx.sites`, ..., forward to the same fields).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .graph import Graph
from .site import Diagnostic, Site
from .strategy import DEFAULT_STRATEGY, ScheduleStrategy, parse_strategy

if TYPE_CHECKING:
    import onnx

    from npu_backend.lowered import LoweredModel
    from npu_backend.target import Target
    from prover.obligation import Obligation
    from prover.policy import Policy
    from prover.proofstore import ProofStore
    from prover.reference import ReferenceProfile


@dataclass(frozen=True, kw_only=True)
class CheckOptions:
    """How each obligation is decided (`prover.api.check`'s options)."""

    timeout_s: float = 10.0
    solver: str = "auto"
    cross_check: bool = False
    store: ProofStore | None = field(default=None, compare=False)
    # A distributed zoo (compiler.zoo.run) decides obligations apart from the models:
    # `known` holds verdicts (or the errors deciding them raised) decided elsewhere, by
    # hash, taken as if decided here; `defer` (the caller's dict) receives every other
    # obligation asked for, by hash, undecided, answered provisionally `proven`: a run that
    # deferred anything only collects what to decide, and its result is discarded.
    known: Mapping[str, Any] | None = field(default=None, compare=False)
    defer: MutableMapping[str, Obligation] | None = field(default=None, compare=False)


@dataclass(frozen=True, kw_only=True)
class CompileConfig:
    """Everything a compilation is asked to do; frozen, normalised once by `build`."""

    target: Target
    policy: Policy
    reference: ReferenceProfile
    check: CheckOptions = CheckOptions()
    jobs: int = 1  # worker processes deciding obligations (see compiler.proving.prove)
    compose_tables: bool = False
    # Where rounding a scale is refuted, synthesise fixed-point parameters in the target's
    # declared space (`[compute.*] synthesis`, compiler.proving.fixed_synthesis). On by
    # default; targets that declare no space are unaffected.
    synthesis: bool = True
    # ONNX compute node name -> scheduling structure ("plain" | "grouped" | "tiled")
    schedule: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # when a fused site's structure is decided (compiler.ir.structure)
    schedule_strategy: ScheduleStrategy = DEFAULT_STRATEGY
    progress: Callable[[int, int], None] | None = field(default=None, compare=False)

    @classmethod
    def build(
        cls,
        *,
        policy: Any = None,
        target: Any = None,
        reference: Any = None,
        schedule: Mapping[str, str] | None = None,
        schedule_strategy: str | ScheduleStrategy | None = None,
        check: CheckOptions | None = None,
        resolve_reference: Callable[[str | None], ReferenceProfile] | None = None,
        **rest: Any,
    ) -> CompileConfig:
        """Normalise the user's forms once: policy "bitwise" | "bounded:N" | Policy | None,
        target Target | TOML path | shipped name | None, reference profile | name | None.

        A reference name is resolved by `resolve_reference` (the app passes
        `compiler.ort.reference_host.resolve_reference`, which can probe this host's ONNX
        Runtime for `ort-host`); without one, only the prover's machine-independent
        profiles are known (`prover.reference.get_profile`)."""
        from npu_backend.target import Target, load_target
        from prover.policy import Policy

        if policy is None:
            policy = Policy(0)
        elif isinstance(policy, str):
            policy = Policy.parse(policy)
        if not isinstance(target, Target):
            target = load_target(target if target is None else Path(target))
        if reference is None or isinstance(reference, str):
            reference = (resolve_reference or _named_profile)(reference)
        return cls(
            target=target,
            policy=policy,
            reference=reference,
            check=check or CheckOptions(),
            schedule=MappingProxyType(dict(schedule or {})),
            schedule_strategy=parse_strategy(schedule_strategy),
            **rest,
        )

    def asked_structure(self, origin: tuple[str, ...]) -> str | None:
        """The scheduling structure the user's map asks for the compute op standing for
        `origin` (None: not in the map)."""
        return next((self.schedule[name] for name in origin if name in self.schedule), None)

    def structure_of(self, origin: tuple[str, ...]) -> str:
        """The scheduling structure asked for the compute op standing for `origin`."""
        asked = self.asked_structure(origin)
        return "plain" if asked is None else asked


@dataclass(kw_only=True)
class PipelineState:
    """What the passes produce and hand on, beside the IR itself."""

    model: onnx.ModelProto | None = None  # the checked original model (replay reference)
    original: Graph | None = None  # the IR straight from the frontend
    sites: list[Site] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)  # reference_divergence, ...
    verdicts: dict[str, Any] = field(default_factory=dict)  # obligation hash -> Verdict | error
    # site id -> (key, [(obligation, columns, lift column)] per epilogue group + index map),
    # built once by compiler.proving.prove.site_obligations
    obligations: dict[str, tuple[Any, list[tuple[Obligation, tuple[int, ...], int]]]] = field(
        default_factory=dict
    )
    lowered: LoweredModel | None = None
    log: list[str] = field(default_factory=list)


def _named_profile(name: str | None) -> ReferenceProfile:
    """A machine-independent profile by name (None: the default); ValueError otherwise."""
    from prover.reference import DEFAULT_PROFILE, HOST, get_profile

    if name == HOST:
        raise ValueError(
            f"reference {HOST!r} probes this host's ONNX Runtime: pass "
            "resolve_reference=compiler.ort.reference_host.resolve_reference"
        )
    return get_profile(DEFAULT_PROFILE if name is None else name)


_CONFIG = tuple(f.name for f in fields(CompileConfig))
_CHECK = tuple(f.name for f in fields(CheckOptions))
_STATE = tuple(f.name for f in fields(PipelineState))


class Context:
    """The configuration and the state one pipeline run works with.

    `Context(config, state)`; or, for tests and scripts, `Context(target=..., policy=...,
    model=..., ...)` with the flat field names (a config is then built from them).
    Flat attribute reads (`ctx.target`, `ctx.timeout_s`, `ctx.sites`) forward to the
    config, its check options or the state; only state fields can be assigned.
    """

    __slots__ = ("config", "state")

    def __init__(
        self,
        config: CompileConfig | None = None,
        state: PipelineState | None = None,
        **flat: Any,
    ) -> None:
        if config is None:
            check = CheckOptions(**{k: flat.pop(k) for k in _CHECK if k in flat})
            config = CompileConfig.build(
                check=check, **{k: flat.pop(k) for k in _CONFIG if k in flat}
            )
        if state is None:
            state = PipelineState(**{k: flat.pop(k) for k in _STATE if k in flat})
        if flat:
            raise TypeError(f"Context: unknown field(s) {', '.join(sorted(flat))}")
        object.__setattr__(self, "config", config)
        object.__setattr__(self, "state", state)

    def __getattr__(self, name: str) -> Any:
        if name in _STATE:
            return getattr(self.state, name)
        if name in _CONFIG:
            return getattr(self.config, name)
        if name in _CHECK:
            return getattr(self.config.check, name)
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _STATE:
            raise AttributeError(f"Context.{name} is configuration (frozen) or unknown")
        setattr(self.state, name, value)

    def fresh(self) -> Context:
        """The same configuration with a new state holding this run's model and original IR."""
        return Context(
            self.config, PipelineState(model=self.state.model, original=self.state.original)
        )
