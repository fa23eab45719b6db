"""The cost ledger: what each fusion saves, MEASURED by simulating fused and unfused programs.

Two simulator runs per model, whatever the number of fusions: the program as
generated, and the fully unfused program (every fused MatMul split as
`unfuse_with_add` does: MatMul with requantize[+clip], then a standalone activation;
an absorbed QLinearAdd becomes the original's host op again), generated for the same
target and so under the same schedule strategy. Both runs must give identical graph
outputs and identical values for every site's output tensor, otherwise `LedgerError`.

Per fusion, counters are attributed per instruction: every instruction belongs to the
step it was emitted for (`owners`), so a site's entry is the counters of its own
instructions in the unfused program (MatMul, host add, activation) minus those of its
fused MatMul. The model total is the difference of the two whole-program counters.
Counters are read generically (every numeric field of `Counters.to_json`, flattened as
"bytes_read.sram", "cycles_by_opcode.MatMul", ...), so a counter the simulator adds reaches
`counters_before`/`counters_after` without code here; peaks are high-water marks per step.

A fusion "costs more than it saves" on a target when its cycles saved are negative
(bytes moved saved, where the simulator models no cycles).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from prover.errors import BadInput
from prover.inttypes import int_type
from prover.terms import Var, op

from .buffers import CodegenError, infer_specs, memory_issues, nbytes
from .codegen import generate
from .input_ranges import index_ranges
from .isa import (
    Activation,
    Clip,
    Concat,
    DmaOut,
    Eltwise,
    HostCall,
    MatMul,
    MaxPool,
    Move,
    Requant,
)
from .lowered import (
    HostKernel,
    LoweredModel,
    NpuEltwise,
    NpuLut,
    NpuMatMul,
    Step,
    TensorSpec,
    unfuse,
)
from .postprocess import posts_but_scale, posts_of
from .program import Program
from .simulator import Counters, InstructionCost, SimulatorInputError, execute
from .target import Target
from .validate import ValidationError, validate_step


class LedgerError(RuntimeError):
    """Fused and unfused programs disagree (a backend bug), or the model has no inputs to run."""


class LedgerInputError(LedgerError, BadInput):
    """ONNX Runtime refuses the values the ledger made up for an input (a range the ledger
    does not know, e.g. an int64 input used as a shape): the user gives the inputs."""


Flat = dict[str, int]  # counter name ("bytes_read.sram", "table_loads", ...) -> value

# counter-name fragments whose values are high-water marks, not sums over instructions
_PEAK = "peak"


@dataclass(frozen=True, kw_only=True)
class FusionEntry:
    """Measured effect of one fusion: the site's instructions, unfused minus fused.

    `*_before` are the unfused program's, `*_after` the fused program's figures for the
    instructions of this site only; savings are positive when fusing helps.
    """

    site: str
    onnx_nodes: tuple[str, ...]
    intermediate: str  # the tensor the fusion no longer materialises
    elements: int  # E
    element_bytes: int  # b
    bytes_not_written: int  # measured: sram bytes written, unfused - fused
    bytes_not_read: int  # measured: sram bytes read, unfused - fused
    table_loads_added: int  # measured: fused - unfused table loads
    param_loads_added: int
    instructions_before: int  # the site's instructions in the unfused program
    instructions_after: int  # the site's instructions in the fused program
    removed_ops: tuple[str, ...] = ()  # ops the fusion absorbed besides the activation
    dram_bytes_not_moved: int = 0  # measured: dram bytes read + written, unfused - fused
    table_loads_before: int = 0
    table_loads_after: int = 0
    param_loads_before: int = 0
    param_loads_after: int = 0
    bytes_moved_before: int = 0  # every memory's bytes read + written
    bytes_moved_after: int = 0
    weight_rereads_removed: int = 0  # dram bytes of weights read again, unfused - fused
    input_rereads_removed: int = 0  # the same for inputs and activations
    peak_sram_before: int | None = (
        None  # most sram bytes live while the site runs (None: not counted)
    )
    peak_sram_after: int | None = None
    cycles_before: int | None = None  # None: the simulator models no cycles
    cycles_after: int | None = None
    counters_before: Flat = field(default_factory=dict)  # every counter, for reports
    counters_after: Flat = field(default_factory=dict)

    @property
    def expected_bytes(self) -> int:
        """E x b: the intermediate tensor's size."""
        return self.elements * self.element_bytes

    @property
    def cost_basis(self) -> str:
        """What decides `costs_more`: "cycles" when measured, else "bytes"."""
        return "cycles" if self.cycles_before is not None else "bytes"

    @property
    def saved(self) -> int:
        """Cycles (else bytes moved) the fusion saves on this target; negative: it costs."""
        if self.cycles_before is not None and self.cycles_after is not None:
            return self.cycles_before - self.cycles_after
        return self.bytes_moved_before - self.bytes_moved_after

    @property
    def costs_more(self) -> bool:
        """True when the fusion costs more than it saves on this target."""
        return self.saved < 0

    def to_json(self) -> dict:
        d = asdict(self)
        d["onnx_nodes"] = list(self.onnx_nodes)
        d["removed_ops"] = list(self.removed_ops)
        d["expected_bytes"] = self.expected_bytes
        d["cost_basis"] = self.cost_basis
        d["saved"] = self.saved
        d["costs_more"] = self.costs_more
        return d


@dataclass(frozen=True)
class ModelLedger:
    """The per-fusion entries and the two whole-program counters they come from."""

    fusions: list[FusionEntry]
    fused: Flat  # every counter of the fused program
    unfused: Flat  # every counter of the unfused program
    # fused sites whose unfused form the target cannot hold (kept fused in the baseline):
    # site -> (onnx nodes, why)
    not_measured: dict[str, tuple[tuple[str, ...], str]] = field(default_factory=dict)

    @property
    def cost_basis(self) -> str:
        return "cycles" if "cycles" in self.fused else "bytes"

    @property
    def saved(self) -> int:
        """Cycles (else bytes moved) the whole model saves by its fusions."""
        if "cycles" in self.fused:
            return self.unfused["cycles"] - self.fused["cycles"]
        return bytes_moved(self.unfused) - bytes_moved(self.fused)

    def total_json(self) -> dict:
        """Per-model total: unfused and fused counters, savings, fusions that cost."""
        return {
            "fusions": len(self.fusions),
            "costing_more": [e.site for e in self.fusions if e.costs_more],
            "cost_basis": self.cost_basis,
            "saved": self.saved,
            "bytes_moved_before": bytes_moved(self.unfused),
            "bytes_moved_after": bytes_moved(self.fused),
            "counters_before": dict(self.unfused),
            "counters_after": dict(self.fused),
            "not_measured": [
                {"site": s, "onnx_nodes": list(nodes), "reason": why}
                for s, (nodes, why) in self.not_measured.items()
            ],
        }


def random_inputs(
    specs: list[TensorSpec],
    seed: int = 0,
    ranges: Mapping[str, tuple[int, int]] | None = None,
) -> dict[str, np.ndarray]:
    """Deterministic random inputs covering each integer type's full range, or the range
    `ranges` gives an input (half-open [lo, hi): a Gather's indices, `input_ranges`);
    booleans, strings (decimal text) and floats (standard normal) otherwise."""
    rng = np.random.default_rng(seed)
    ranges = ranges or {}
    out: dict[str, np.ndarray] = {}
    for s in specs:
        dt = s.numpy_dtype
        if s.name in ranges and dt.kind in "iu":
            lo, hi = ranges[s.name]
            out[s.name] = rng.integers(lo, max(hi, lo + 1), s.shape).astype(dt)
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            out[s.name] = rng.integers(info.min, int(info.max) + 1, s.shape).astype(dt)
        elif dt.kind == "b":
            out[s.name] = rng.integers(0, 2, s.shape).astype(bool)
        elif s.dtype == "string":
            out[s.name] = rng.integers(0, 10, s.shape).astype(str).astype(object)
        else:
            out[s.name] = rng.standard_normal(s.shape).astype(dt)
    return out


def unfuse_with_add(step: NpuMatMul) -> tuple[list[Step], dict[str, np.ndarray]]:
    """`unfuse`, with an epilogue add stage split out as the original's host QLinearAdd.

    Returns the steps and the constants they add (the column index of each element).
    """
    if not any(p.add is not None for p in posts_but_scale(step.post)):
        return unfuse(step), {}  # no add stage
    posts = posts_of(step.post)
    adds = [p.add for p in posts if p.add is not None]
    if not step.fused or not adds or len(adds) != len(posts):
        return unfuse(step), {}  # no add stage, or only on some columns: not split
    ty = int_type(adds[0].type)
    n = len(posts)
    if n * ty.size > 65536:
        return unfuse(step), {}  # not expressible as one uint16-indexed table: not split
    mm, act = unfuse(step)
    if not (isinstance(mm, NpuMatMul) and isinstance(act, NpuLut)):
        raise LedgerError(f"{step.name}: unfuse did not give a MatMul and an activation")
    inner = tuple(p.requant_only() for p in posts) if n > 1 else posts[0].requant_only()
    pre_add = f"{step.out}.pre_add"
    mm = replace(mm, out=pre_add, post=inner)
    # per column j the add is a table over the 8-bit value: one lookup at j*size + (x - min)
    table = [v for a in adds for v in a.table()] + [0] * (65536 - n * ty.size)
    col = f"{step.out}.column"
    index = op(
        "add", op("mul_const", Var(col), c=ty.size), op("add_const", Var(pre_add), c=-ty.min)
    )
    term = op("lut", index, table=tuple(table), in_type="uint16", index_order="offset")
    add = HostKernel(f"{step.name}.add", (pre_add, col), act.x, term, ty.name, step.onnx_nodes)
    # uint8: the host reads one byte per column, as the QLinearAdd reads its 8-bit bias
    return [mm, add, act], {col: np.arange(n, dtype=np.uint8)}


def unfuse_eltwise(step: NpuEltwise) -> list[Step]:
    """An elementwise op with a fused table as the op (into `<out>.pre_act`) and a
    standalone activation; one without a table comes back unchanged."""
    if step.lut is None:
        return [step]
    mid = f"{step.out}.pre_act"
    op_step = replace(step, out=mid, lut=None, function=None)
    act = NpuLut.from_params(
        f"{step.name}.act", mid, step.out, step.lut, step.function, step.onnx_nodes
    )
    return [op_step, act]


@dataclass(frozen=True)
class _Split:
    """One fused site as the unfused model has it."""

    site: NpuMatMul | NpuEltwise
    steps: tuple[Step, ...]  # MatMul(requantize) [, host add], activation

    @property
    def activation(self) -> NpuLut:
        act = self.steps[-1]
        if not isinstance(act, NpuLut):
            raise LedgerError(
                f"{self.site.name}: the split does not end in a standalone activation"
            )
        return act


def unfuse_all(
    lowered: LoweredModel, keep: Collection[str] = ()
) -> tuple[LoweredModel, list[_Split]]:
    """The unfused model (every fused MatMul not named in `keep` split by `unfuse_with_add`)
    and its split sites."""
    steps: list[Step] = []
    extra: dict[str, np.ndarray] = {}
    splits = []
    for st in lowered.steps:
        if isinstance(st, NpuMatMul) and st.fused and st.name not in keep:
            split, consts = unfuse_with_add(st)
            splits.append(_Split(st, tuple(split)))
            steps.extend(split)
            extra.update(consts)
        elif isinstance(st, NpuEltwise) and st.lut is not None and st.name not in keep:
            parts = unfuse_eltwise(st)
            splits.append(_Split(st, tuple(parts)))
            steps.extend(parts)
        else:
            steps.append(st)
    model = LoweredModel(
        list(lowered.inputs),
        list(lowered.outputs),
        {**lowered.constants, **extra},
        steps,
        lowered.dynamic_batch,
    )
    return model, splits


# --- per-instruction attribution --------------------------------------------------------

_COMPUTE = (MatMul, Activation, Requant, Clip, Eltwise, Move, MaxPool, Concat, HostCall)


def _step_of(name: str, steps: set[str]) -> str | None:
    """The step an instruction named `name` belongs to (tiles may add a suffix to it)."""
    if name in steps:
        return name
    best = None
    for s in steps:
        if (
            name.startswith(s)
            and not name[len(s)].isalnum()
            and (best is None or len(s) > len(best))
        ):
            best = s
    return best


def owners(program: Program, step_names: Iterable[str]) -> list[str | None]:
    """The step each instruction was emitted for.

    An instruction naming its step (a `step` string field, else a compute instruction's
    name) belongs to it. Loads and spills belong to the next compute instruction they
    prepare; a DmaOut of the tensor the previous compute instruction wrote, and anything
    after the last compute instruction, to that previous one.
    """
    names = set(step_names)
    own: list[str | None] = [None] * len(program.instructions)
    last: tuple[str | None, str | None] = (None, None)  # (step, tensor it wrote)
    pending: list[int] = []
    for k, ins in enumerate(program.instructions):
        tag = getattr(ins, "step", None)
        if isinstance(tag, str):
            who: str | None = _step_of(tag, names) or tag
        elif isinstance(ins, _COMPUTE):
            who = _step_of(ins.name, names)
        elif isinstance(ins, DmaOut) and last[0] is not None and ins.tensor == last[1]:
            own[k] = last[0]
            continue
        else:
            pending.append(k)
            continue
        for p in pending:
            own[p] = who
        pending = []
        own[k] = who
        out = getattr(ins, "out", None)
        last = (who, out if isinstance(out, str) else None)
    for p in pending:
        own[p] = last[0]
    return own


def flat(c: Counters | Mapping) -> Flat:
    """Every numeric counter as a flat name -> value map ("bytes_read.sram", "cycles", ...)."""
    data = c.to_json() if isinstance(c, Counters) else c
    out: Flat = {}
    for k, v in data.items():
        if isinstance(v, Mapping):
            for kk, vv in v.items():
                if isinstance(vv, int | float | np.integer) and not isinstance(vv, bool):
                    out[f"{k}.{kk}"] = int(vv)
        elif isinstance(v, int | float | np.integer) and not isinstance(v, bool):
            out[k] = int(v)
    return out


def _is_peak(name: str) -> bool:
    return _PEAK in name


def _add(acc: Flat, before: Flat, after: Flat) -> None:
    """Accumulate the counters one stretch of instructions changed (peaks: the highest)."""
    for k, v in after.items():
        if _is_peak(k):
            acc[k] = max(acc.get(k, 0), v)
        else:
            acc[k] = acc.get(k, 0) + v - before.get(k, 0)


@dataclass
class Profile:
    """One simulator run: outputs, machine memory at the end, counters in total and per step."""

    outputs: dict[str, np.ndarray]
    # every tensor at the end: sram, else dram (a tiled MatMul writes its output to dram)
    tensors: dict[str, np.ndarray]
    total: Flat
    by_step: dict[str, Flat]


def profile(
    program: Program,
    inputs: dict[str, np.ndarray],
    step_names: Iterable[str],
    target: Target | None = None,
) -> Profile:
    """Run `program` once (cycles from `target`'s schedule), attributing counters to the
    step of each instruction.

    Peaks (per-memory counters named "*peak*") are high-water marks, not sums: a step's
    peak is the most its own instructions had live (`InstructionCost.live_bytes`); the
    total's is the program's.
    """
    own = owners(program, step_names)
    by_step: dict[str, Flat] = {}
    before = flat(Counters())

    def account(cost: InstructionCost, counters: Counters) -> None:
        nonlocal before
        now = flat(counters)
        after = dict(now)
        after.update({f"peak_bytes.{mem}": v for mem, v in cost.live_bytes.items()})
        _add(by_step.setdefault(own[cost.index] or "", {}), before, after)
        before = now

    trace = execute(program, inputs, target=target, on_step=account)
    tensors = {**trace.memory["dram"], **trace.memory["sram"]}
    return Profile(trace.outputs, tensors, flat(trace.counters), by_step)


# --- the ledger -------------------------------------------------------------------------


def bytes_moved(c: Flat) -> int:
    """Bytes read plus written, over every memory."""
    return sum(v for k, v in c.items() if k.startswith(("bytes_read.", "bytes_written.")))


def _merge(parts: Iterable[Flat]) -> Flat:
    out: Flat = {}
    for p in parts:
        for k, v in p.items():
            out[k] = max(out.get(k, 0), v) if _is_peak(k) else out.get(k, 0) + v
    return out


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Both runs hold the tensor and its values are equal (a missing one is not a match)."""
    return a is not None and b is not None and np.array_equal(a, b)


def _entry(split: _Split, specs: Mapping[str, TensorSpec | None], u: Flat, f: Flat) -> FusionEntry:
    st = split.site
    mid = split.activation.x
    spec = specs.get(mid)
    if spec is None:
        raise LedgerError(f"{st.name}: the shape of intermediate {mid!r} is unknown")
    g = lambda c, k: c.get(k, 0)  # noqa: E731
    return FusionEntry(
        site=st.name,
        onnx_nodes=tuple(st.onnx_nodes),
        intermediate=mid,
        elements=int(np.prod(spec.shape)),
        element_bytes=np.dtype(spec.dtype).itemsize,
        bytes_not_written=g(u, "bytes_written.sram") - g(f, "bytes_written.sram"),
        bytes_not_read=g(u, "bytes_read.sram") - g(f, "bytes_read.sram"),
        table_loads_added=g(f, "table_loads") - g(u, "table_loads"),
        param_loads_added=g(f, "param_loads") - g(u, "param_loads"),
        instructions_before=g(u, "instructions"),
        instructions_after=g(f, "instructions"),
        removed_ops=("QLinearAdd",) if len(split.steps) == 3 else (),
        dram_bytes_not_moved=(
            g(u, "bytes_read.dram")
            + g(u, "bytes_written.dram")
            - g(f, "bytes_read.dram")
            - g(f, "bytes_written.dram")
        ),  # fmt: skip
        table_loads_before=g(u, "table_loads"),
        table_loads_after=g(f, "table_loads"),
        param_loads_before=g(u, "param_loads"),
        param_loads_after=g(f, "param_loads"),
        bytes_moved_before=bytes_moved(u),
        bytes_moved_after=bytes_moved(f),
        weight_rereads_removed=g(u, "weight_reread_bytes") - g(f, "weight_reread_bytes"),
        input_rereads_removed=g(u, "input_reread_bytes") - g(f, "input_reread_bytes"),
        peak_sram_before=u.get("peak_bytes.sram"),
        peak_sram_after=f.get("peak_bytes.sram"),
        cycles_before=u.get("cycles"),
        cycles_after=f.get("cycles"),
        counters_before={k: v for k, v in u.items() if v},  # zeros left out: compact reports
        counters_after={k: v for k, v in f.items() if v},
    )


def _unfused_program(
    lowered: LoweredModel, target: Target
) -> tuple[LoweredModel, list[_Split], Program | None, dict[str, tuple[tuple[str, ...], str]]]:
    """The unfused model and its program. A site whose unfused form needs buffers the target
    does not have (a standalone activation cannot be tiled) stays fused, with the reason.
    No program where nothing is fused."""
    unfused, splits = unfuse_all(lowered)
    if not splits:  # nothing fused: no baseline to generate
        return unfused, splits, None, {}
    try:
        return unfused, splits, generate(unfused, target), {}
    except (CodegenError, ValidationError) as e:
        first = str(e)
    specs = infer_specs(unfused)
    sizes = {k: nbytes(v) for k, v in specs.items() if v is not None}
    kept = {}
    for sp in splits:
        issues = [
            i
            for st in sp.steps
            for i in memory_issues(st, sizes, target) + validate_step(st, target)
        ]
        if issues:
            why = f"its unfused form cannot be generated on this target: {issues[0].message}"
            kept[sp.site.name] = (tuple(sp.site.onnx_nodes), why)
    if kept:
        unfused, splits = unfuse_all(lowered, kept)
        try:
            return unfused, splits, generate(unfused, target), kept
        except (CodegenError, ValidationError) as e:
            first = str(e)
    raise LedgerError(f"the unfused program cannot be generated: {first}")


def model_ledger(
    lowered: LoweredModel,
    target: Target,
    inputs: dict[str, np.ndarray] | None = None,
    program: Program | None = None,
) -> ModelLedger:
    """Measure every fused MatMul (and elementwise op with a table) of `lowered`: two
    simulator runs, whatever their number. `program`: `lowered`'s program where the caller
    has generated it already (else generated here).

    A site whose unfused form the target cannot hold stays fused in the baseline and is
    listed in `not_measured` with the reason instead of getting an entry."""
    made_up = inputs is None
    if inputs is None:
        legal = index_ranges(lowered.steps, [s.name for s in lowered.inputs])
        inputs = random_inputs(lowered.inputs, ranges=legal)
    try:
        fused = generate(lowered, target) if program is None else program
        fused_run = profile(fused, inputs, [s.name for s in lowered.steps], target)
    except SimulatorInputError as e:
        if not made_up:
            raise
        raise LedgerInputError(
            f"the ledger's made-up inputs are refused ({e}); give the inputs to measure on "
            "with --input IN.npz"
        ) from None
    unfused, splits, baseline, kept = _unfused_program(lowered, target)
    if baseline is None:  # nothing fused
        return ModelLedger([], fused_run.total, fused_run.total, kept)
    # only the fused sites' outputs are compared: the fused run's other tensors (every
    # activation of the model) are let go before the unfused run holds its own
    wanted = {sp.site.out for sp in splits}
    fused_run.tensors = {k: v for k, v in fused_run.tensors.items() if k in wanted}
    un_run = profile(baseline, inputs, [s.name for s in unfused.steps], target)
    for sp in splits:
        out = sp.site.out
        if not _same(fused_run.tensors.get(out), un_run.tensors.get(out)):
            raise LedgerError(f"{sp.site.name}: fused and unfused programs differ on {out!r}")
    for name, val in fused_run.outputs.items():
        if not np.array_equal(val, un_run.outputs[name]):
            raise LedgerError(f"fused and unfused programs differ on output {name!r}")
    specs = infer_specs(unfused)
    entries = [
        _entry(
            sp,
            specs,
            _merge(un_run.by_step.get(s.name, {}) for s in sp.steps),
            fused_run.by_step.get(sp.site.name, {}),
        )
        for sp in splits
    ]
    return ModelLedger(entries, fused_run.total, un_run.total, kept)


def ledger(
    lowered: LoweredModel,
    target: Target,
    inputs: dict[str, np.ndarray] | None = None,
) -> list[FusionEntry]:
    """One measured `FusionEntry` per fused MatMul in `lowered` (see `model_ledger`)."""
    return model_ledger(lowered, target, inputs).fusions
