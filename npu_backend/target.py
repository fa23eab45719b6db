"""Target descriptions: TOML files loaded into frozen dataclasses, validated with clear errors.

A target says, per compute op (MatMul, Conv), which postprocessing its hardware
can apply (requantization scheme, LUT function kinds, intermediate storage types,
LUT sizes, clip, where a bias can be added) and which scheduling structures can carry
fused postprocessing;
plus memory sizes, the table memory's slots and how its toolchain builds tables;
plus the tile constraints codegen schedules against and the simulator's cycle model
uses (`Schedule`: MAC array shape, DMA bandwidth per memory, latencies, overlap).
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prover.errors import BadInput
from prover.inttypes import TYPES
from prover.lut import (
    FUNCTIONS,
    INDEX_ORDERS,
    LOADED_TABLE,
    PRECISIONS,
    ROUNDINGS,
    ZP_PLACEMENTS,
    LutSpec,
)
from prover.requant import onnx_requant_scale, quantize_multiplier

from .lowered import STRUCTURES
from .postprocess import REQUANT_SCHEMES, RequantParams

TARGETS_DIR = Path(__file__).parent / "targets"
DEFAULT_TARGET = TARGETS_DIR / "npu_float.toml"
MEMORIES = ("dram", "sram", "wmem", "pmem")
# Where a compute unit can add a bias: "accumulator" (an int32 constant added to the
# accumulator before requantization; exact), "requantized" (a post-requantization add
# stage: ONNX Runtime's QLinearAdd of the requantized value and a constant, in float32).
BIAS_STAGES = ("accumulator", "requantized")


class TargetError(BadInput, ValueError):
    """A target description that is missing, malformed or inconsistent."""


@dataclass(frozen=True, kw_only=True)
class ComputeCaps:
    """What one compute op's postprocessor supports on a target."""

    op: str
    requant_scheme: str
    functions: frozenset[str]
    intermediate_types: frozenset[str]
    lut_sizes: frozenset[int]
    clip: bool
    structures: frozenset[str]
    fused_structures: frozenset[str]
    bias: frozenset[str] = frozenset({"accumulator"})
    add_fma: bool = True  # the "requantized" add stage evaluates MLAS's FMA formula
    # Fixed-point parameters the compiler may choose by synthesis (prover.synthesis) where
    # rounding the scale is refuted: a subset of SYNTHESIS_PARAMS; empty = rounding only.
    synthesis: frozenset[str] = frozenset()
    # Convolutions over a window this path computes (a pointwise conv needs none): kernel
    # sizes (per axis), strides, dilations, and group kinds ("one", "depthwise", "grouped").
    # Empty: no conv over a window.
    window_kernels: frozenset[int] = frozenset()
    window_strides: frozenset[int] = frozenset()
    window_dilations: frozenset[int] = frozenset()
    window_groups: frozenset[str] = frozenset()
    # the unit also takes the largest element of each window (an integer MaxPool)
    max_pool: bool = False
    # Unary regions (compiler.frontend.ops.unary_region) this postprocessor fuses as one
    # table, by kind: the named function the region computes ("silu", "hardswish", ...) or
    # "table" (any other region: a chain, a region requantized inside). Declared per path:
    # a kind missing here is refused on this path whatever another path or `functions`
    # says. Its table size must be in `lut_sizes`. Empty: no region is fused.
    regions: frozenset[str] = frozenset()


SYNTHESIS_PARAMS = ("multiplier", "shift", "zero_point", "table")
WINDOW_GROUPS = ("one", "depthwise", "grouped")
# compute units: MatMul, Conv, and Pool (an average pool as a depthwise all-ones window sum)
COMPUTE_OPS = ("MatMul", "Conv", "Pool")
# the largest kernel size per axis a window may declare (a global pool's is the image)
MAX_WINDOW_KERNEL = 1024


@dataclass(frozen=True)
class StandaloneCaps:
    """The standalone activation / elementwise unit."""

    functions: frozenset[str]
    requant_scheme: str
    clip: bool
    # data movement (a strided gather: Reshape, Transpose) on the NPU; False: on the host
    moves: bool = False


ELTWISE_OPS = ("add", "mul")
ELTWISE_BROADCASTS = ("same", "inner", "outer")


@dataclass(frozen=True)
class EltwiseCaps:
    """The two-input elementwise unit (`[eltwise]`; absent: the target has none).

    `ops`: "add" / "mul" (ORT's QLinearAdd / QLinearMul of two activations); `types`: the
    8-bit operand types; `broadcast`: the operand shapes it reads: "same" (equal shapes),
    "inner" (one operand has one value per span of the innermost output dimensions, e.g.
    [1,C,H,W] with [1,C,1,1]), "outer" (one operand repeats along outer dimensions only,
    e.g. a row [W] over [N,C,H,W]); `fma`: its add fuses each product into its sum;
    `functions`: tables it can apply to its result (a fused activation).
    """

    ops: frozenset[str] = frozenset()
    types: frozenset[str] = frozenset()
    broadcast: frozenset[str] = frozenset()
    fma: bool = True
    functions: frozenset[str] = frozenset()


@dataclass(frozen=True)
class LutBuilder:
    """How the target's toolchain builds activation tables (see `prover.lut.LutSpec`)."""

    rounding: str
    zp_placement: str
    precision: str
    index_order: str


@dataclass(frozen=True)
class TableMemory:
    slots: int
    entries: int
    entry_bytes: int

    @property
    def slot_bytes(self) -> int:
        return self.entries * self.entry_bytes


DMA_MEMORIES = ("dram", "sram", "wmem", "pmem", "tmem")


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """Tile constraints and timing of the NPU (the `[schedule]` table; every key optional).

    The MAC array computes a block of `mac_m` x `mac_n` outputs over `mac_k` products in
    `cycles_per_mac_block` cycles. `dma_bytes_per_cycle` is the bandwidth of each memory
    (a transfer runs at the slower end's rate). `table_load_cycles`/`param_load_cycles` are
    fixed latencies of a TableLoad/ParamLoad on top of moving their bytes; `launch_cycles`
    is paid by every NPU instruction; `dma_overlap` says whether a tiled MatMul's DMA of the
    next tile overlaps the compute of the current one. The SRAM budget is `memories.sram`.
    """

    mac_m: int = 16
    mac_n: int = 16
    mac_k: int = 64
    cycles_per_mac_block: int = 1
    dma_bytes_per_cycle: tuple[tuple[str, int], ...] = (
        ("dram", 32),
        ("sram", 128),
        ("wmem", 128),
        ("pmem", 16),
        ("tmem", 16),
    )
    table_load_cycles: int = 64
    param_load_cycles: int = 16
    launch_cycles: int = 20
    dma_overlap: bool = True

    def bandwidth(self, mem: str) -> int:
        """Bytes per cycle of memory `mem`."""
        return dict(self.dma_bytes_per_cycle)[mem]


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    path: str
    memories: tuple[tuple[str, int], ...]
    tables: TableMemory
    lut_builder: LutBuilder
    computes: tuple[ComputeCaps, ...]
    standalone: StandaloneCaps
    schedule: Schedule = Schedule()
    eltwise: EltwiseCaps = EltwiseCaps()

    def compute(self, op: str) -> ComputeCaps | None:
        """Capabilities of compute op `op` (one of `COMPUTE_OPS`), or None if the target lacks it."""
        for c in self.computes:
            if c.op == op:
                return c
        return None

    def memory_size(self, mem: str) -> int:
        return dict(self.memories)[mem]

    def lut_spec(
        self,
        function: str,
        in_scale: float,
        in_zp: int,
        in_type: str,
        out_scale: float,
        out_zp: int,
        out_type: str,
    ) -> LutSpec:
        """A `LutSpec` with this target's builder settings (rounding, zp placement, ...)."""
        b = self.lut_builder
        return LutSpec(
            function=function,
            in_scale=float(in_scale),
            in_zp=int(in_zp),
            in_type=in_type,
            out_scale=float(out_scale),
            out_zp=int(out_zp),
            out_type=out_type,
            rounding=b.rounding,
            zp_placement=b.zp_placement,
            precision=b.precision,
            index_order=b.index_order,
        )

    def requant_params(
        self, scale: float, zp: int, out_type: str, op: str = "MatMul"
    ) -> RequantParams:
        """The target's requantization for a real (float) scale; see `requant_from_scale`."""
        caps = self.compute(op)
        if caps is None:
            raise TargetError(f"target {self.name!r} has no compute op {op!r}")
        return requant_from_scale(scale, zp, out_type, caps.requant_scheme)


def requant_from_scale(scale: float, zp: int, out_type: str, scheme: str) -> RequantParams:
    """Convert a real requantization scale to parameters of `scheme`.

    "float32" keeps `float32(scale)`; "fixed_double"/"fixed_single" use
    `prover.requant.quantize_multiplier(float(scale))` (TFLite's quantiser).
    """
    if scheme == "float32":
        return RequantParams("float32", int(zp), out_type, scale=float(np.float32(scale)))
    if scheme in ("fixed_double", "fixed_single"):
        m, s = quantize_multiplier(float(scale))
        return RequantParams(scheme, int(zp), out_type, multiplier=m, shift=s)
    raise TargetError(f"unknown requantization scheme {scheme!r}; known: {REQUANT_SCHEMES}")


def requant_from_scales(
    scales: Sequence[float], zp: int, out_type: str, scheme: str
) -> list[RequantParams]:
    """`[requant_from_scale(s, zp, out_type, scheme) for s in scales]`, the float32
    conversion made once for all of them (a per-channel op has thousands of columns)."""
    if scheme != "float32":
        return [requant_from_scale(s, zp, out_type, scheme) for s in scales]
    return RequantParams("float32", int(zp), out_type).with_scales(float32_scales(scales))


def float32_scales(scales: Sequence[float]) -> list[float]:
    """`requant_from_scale`'s float32 scale (as a float) of each of `scales`, at once."""
    return np.asarray(scales, dtype=np.float64).astype(np.float32).astype(np.float64).tolist()


def onnx_requant_params(
    a_scale: float, b_scale: float, y_scale: float, zp: int, out_type: str, scheme: str
) -> RequantParams:
    """Requant parameters for an ONNX QLinearMatMul's scales on a `scheme` postprocessor.

    The real scale is ONNX Runtime's float32 `(a_scale*b_scale)/y_scale`.
    """
    return requant_from_scale(
        float(onnx_requant_scale(a_scale, b_scale, y_scale)), zp, out_type, scheme
    )


# --- loading and validation -------------------------------------------------------------


class _Section:
    """Typed access to one TOML table; every key must be consumed (unknown keys are errors)."""

    used: set[str]

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise TargetError(f"[{where}] must be a table")
        self.data, self.where, self.used = data, where, set()

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        self.used.add(key)
        if key not in self.data:
            if default is ...:
                raise TargetError(f"[{self.where}] is missing required key {key!r}")
            return default
        v = self.data[key]
        if isinstance(v, bool) and kind is int or not isinstance(v, kind):
            raise TargetError(f"[{self.where}] {key} = {v!r}: expected {_kind_name(kind)}")
        return v

    def choice(self, key: str, allowed: tuple[str, ...]) -> str:
        v = self.get(key, str)
        if v not in allowed:
            raise TargetError(f"[{self.where}] {key} = {v!r}: must be one of {list(allowed)}")
        return v

    def choices(self, key: str, allowed, kind: type = str, default: Any = ...) -> frozenset:
        vals = self.get(key, list, default)
        for v in vals:
            if not isinstance(v, kind) or isinstance(v, bool) or v not in allowed:
                raise TargetError(
                    f"[{self.where}] {key}: {v!r} is not one of {sorted(allowed, key=str)}"
                )
        return frozenset(vals)

    def positive(self, key: str) -> int:
        v = self.get(key, int)
        if v <= 0:
            raise TargetError(f"[{self.where}] {key} = {v}: must be a positive integer")
        return v

    def done(self) -> None:
        extra = set(self.data) - self.used
        if extra:
            raise TargetError(f"[{self.where}] has unknown key(s) {sorted(extra)}")


def _kind_name(kind: Any) -> str:
    names = {str: "a string", int: "an integer", bool: "a boolean", list: "a list", dict: "a table"}
    if isinstance(kind, tuple):
        return " or ".join(names.get(k, k.__name__) for k in kind)
    return names.get(kind, kind.__name__)


def _compute(op: str, data: Any) -> ComputeCaps:
    s = _Section(data, f"compute.{op}")
    caps = ComputeCaps(
        op=op,
        requant_scheme=s.choice("requant_scheme", REQUANT_SCHEMES),
        functions=s.choices("functions", FUNCTIONS),
        intermediate_types=s.choices("intermediate_types", TYPES),
        lut_sizes=s.choices("lut_sizes", {16, 256, 65536}, int),
        clip=s.get("clip", bool),
        structures=s.choices("structures", STRUCTURES),
        fused_structures=s.choices("fused_structures", STRUCTURES),
        bias=s.choices("bias", BIAS_STAGES, default=frozenset({"accumulator"})),
        add_fma=s.get("add_fma", bool, True),
        synthesis=s.choices("synthesis", SYNTHESIS_PARAMS, default=frozenset()),
        window_kernels=s.choices(
            "window_kernels", range(1, MAX_WINDOW_KERNEL + 1), int, frozenset()
        ),
        window_strides=s.choices("window_strides", range(1, 64), int, frozenset()),
        window_dilations=s.choices("window_dilations", range(1, 64), int, frozenset()),
        window_groups=s.choices("window_groups", WINDOW_GROUPS, default=frozenset()),
        max_pool=s.get("max_pool", bool, False),
        regions=s.choices("regions", FUNCTIONS, default=frozenset()),
    )
    s.done()
    unbuilt = sorted(
        k for k in caps.regions if k not in caps.functions and LOADED_TABLE not in caps.functions
    )
    if unbuilt:
        raise TargetError(
            f"[compute.{op}] regions {unbuilt}: neither in functions nor loadable as a "
            f"'{LOADED_TABLE}' (a region kind must be one this postprocessor builds or loads)"
        )
    if caps.synthesis and caps.requant_scheme not in ("fixed_double", "fixed_single"):
        raise TargetError(f"[compute.{op}] synthesis needs a fixed-point requant_scheme")
    if caps.synthesis and not {"multiplier", "shift", "table"} <= caps.synthesis:
        raise TargetError(f"[compute.{op}] synthesis must include multiplier, shift and table")
    if "plain" not in caps.structures:
        raise TargetError(f"[compute.{op}] structures must include 'plain'")
    if not caps.fused_structures <= caps.structures:
        raise TargetError(f"[compute.{op}] fused_structures must be a subset of structures")
    return caps


def parse_target(data: dict[str, Any], path: str = "<memory>") -> Target:
    """Build a `Target` from parsed TOML, raising `TargetError` on any problem."""
    top = _Section(data, "top level")
    meta = _Section(top.get("target", dict), "target")
    name = meta.get("name", str)
    description = meta.get("description", str, "")
    meta.done()

    mems = _Section(top.get("memories", dict), "memories")
    memories = []
    for m in MEMORIES:
        ms = _Section(mems.get(m, dict), f"memories.{m}")
        memories.append((m, ms.positive("size")))
        ms.done()
    mems.done()

    ts = _Section(top.get("tables", dict), "tables")
    tables = TableMemory(ts.positive("slots"), ts.positive("entries"), ts.positive("entry_bytes"))
    ts.done()
    if tables.entries != 256:
        raise TargetError(f"[tables] entries = {tables.entries}: table slots hold 256 entries")

    lb = _Section(top.get("lut_builder", dict), "lut_builder")
    builder = LutBuilder(
        lb.choice("rounding", ROUNDINGS),
        lb.choice("zp_placement", ZP_PLACEMENTS),
        lb.choice("precision", PRECISIONS),
        lb.choice("index_order", INDEX_ORDERS),
    )
    lb.done()

    comp = _Section(top.get("compute", dict), "compute")
    computes = []
    for op in sorted(comp.data):
        if op not in COMPUTE_OPS:
            raise TargetError(
                f"[compute.{op}]: unknown compute op; known: {', '.join(COMPUTE_OPS)}"
            )
        computes.append(_compute(op, comp.get(op, dict)))
    comp.done()
    if not computes:
        raise TargetError("[compute] must describe at least one compute op")

    st = _Section(top.get("standalone", dict), "standalone")
    standalone = StandaloneCaps(
        st.choices("functions", FUNCTIONS),
        st.choice("requant_scheme", REQUANT_SCHEMES),
        st.get("clip", bool),
        st.get("moves", bool, False),
    )
    st.done()
    el = _Section(top.get("eltwise", dict, {}), "eltwise")
    eltwise = EltwiseCaps(
        el.choices("ops", ELTWISE_OPS, default=frozenset()),
        el.choices("types", ("uint8", "int8"), default=frozenset()),
        el.choices("broadcast", ELTWISE_BROADCASTS, default=frozenset()),
        el.get("fma", bool, True),
        el.choices("functions", FUNCTIONS, default=frozenset()),
    )
    el.done()
    schedule = _schedule(top.get("schedule", dict, {}))
    top.done()
    return Target(
        name,
        description,
        path,
        tuple(memories),
        tables,
        builder,
        tuple(computes),
        standalone,
        schedule,
        eltwise,
    )


def _schedule(data: Any) -> Schedule:
    """The `[schedule]` table; missing keys take `Schedule`'s defaults."""
    s = _Section(data, "schedule")
    d = Schedule()

    def num(key: str, least: int) -> int:
        v = s.get(key, int, getattr(d, key))
        if v < least:
            what = "a positive integer" if least else "a non-negative integer"
            raise TargetError(f"[schedule] {key} = {v}: must be {what}")
        return v

    mac = s.get("mac_array", list, [d.mac_m, d.mac_n, d.mac_k])
    if len(mac) != 3 or any(not isinstance(v, int) or isinstance(v, bool) or v <= 0 for v in mac):
        raise TargetError(
            f"[schedule] mac_array = {mac!r}: must be three positive integers [M, N, K]"
        )
    bw = _Section(s.get("dma_bytes_per_cycle", dict, {}), "schedule.dma_bytes_per_cycle")
    default_bw = dict(d.dma_bytes_per_cycle)
    bandwidth = []
    for mem in DMA_MEMORIES:
        v = bw.get(mem, int, default_bw[mem])
        if v <= 0:
            raise TargetError(
                f"[schedule.dma_bytes_per_cycle] {mem} = {v}: must be a positive integer"
            )
        bandwidth.append((mem, v))
    bw.done()
    out = Schedule(
        mac_m=mac[0],
        mac_n=mac[1],
        mac_k=mac[2],
        cycles_per_mac_block=num("cycles_per_mac_block", 1),
        dma_bytes_per_cycle=tuple(bandwidth),
        table_load_cycles=num("table_load_cycles", 0),
        param_load_cycles=num("param_load_cycles", 0),
        launch_cycles=num("launch_cycles", 0),
        dma_overlap=s.get("dma_overlap", bool, d.dma_overlap),
    )
    s.done()
    return out


def load_target(path: str | Path | None = None) -> Target:
    """Load and validate a target TOML file; None loads the default shipped target."""
    return load_target_bytes(path)[0]


def load_target_bytes(path: str | Path | None = None) -> tuple[Target, bytes]:
    """`load_target`, and the file's bytes it parsed (read once: a caller that fingerprints
    the target hashes exactly what was loaded)."""
    p = Path(path) if path is not None else DEFAULT_TARGET
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise TargetError(f"cannot read target file {str(p)!r}: {e.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise TargetError(f"target file {str(p)!r} is not valid TOML: {e}") from None
    try:
        return parse_target(data, str(p)), raw
    except TargetError as e:
        raise TargetError(f"target file {str(p)!r}: {e}") from None


def shipped_targets() -> dict[str, Path]:
    """Name -> path of every target shipped in npu_backend/targets/."""
    return {p.stem: p for p in sorted(TARGETS_DIR.glob("*.toml"))}
