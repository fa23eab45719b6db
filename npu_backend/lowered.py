"""The codegen input: a lowered model of NPU steps and host steps (plain dataclasses).

The compiler's final pass produces a `LoweredModel`; `npu_backend.codegen.generate`
turns it into a `Program`. Tensors are named by strings; constants (weights,
biases) live in `LoweredModel.constants`. Steps are in execution order and each
step's inputs are graph inputs, constants or outputs of earlier steps.

NPU steps:
- `NpuMatMul`: integer MatMul with an optional epilogue (`post`). `post=None`
  means the output is the raw int32 accumulator. A `PostProcess` without a LUT
  is a requantize-only epilogue (the unfused form); with a LUT it is fused.
  Per-channel epilogues are a tuple of `PostProcess`, one per output column.
- `NpuLut`: standalone activation (table lookup).
- `NpuRequant`, `NpuClip`: standalone elementwise integer ops.
- `NpuEltwise`: the two-input elementwise unit (QLinearAdd / QLinearMul of two
  activations, numpy broadcasting), with an optional fused table after it.
- `NpuMove`: data movement (a strided gather: reshape, transpose).
- `NpuMaxPool`: the largest element of each window (an integer MaxPool).
- `NpuConcat`: data movement joining several tensors along one axis.

Host steps:
- `HostKernel`: an elementwise integer op run on the host with the kernel's
  concrete semantics; `term` is a `prover.terms` term whose variables are the
  input tensor names (numpy broadcasting between inputs).
- `HostOnnx`: a serialized ONNX subgraph run by ONNX Runtime (graph optimisations
  off) on the host; its graph input/output names are the tensor names.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from prover.conv import Window
from prover.eltwise import EltwiseParams
from prover.terms import Term

from .postprocess import (
    ColumnPosts,
    LutParams,
    Post,
    PostProcess,
    RequantParams,
    posts_but_scale,
)

STRUCTURES = ("plain", "grouped", "tiled")


@dataclass(frozen=True)
class TensorSpec:
    """A named tensor: numpy dtype name (e.g. "int8", "float32", "bool"; "string" for
    ONNX strings, held as object arrays) and static shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def numpy_dtype(self) -> np.dtype:
        return numpy_dtype(self.dtype)


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a tensor's dtype name ("string": object, as ONNX Runtime gives)."""
    return np.dtype(object) if name == "string" else np.dtype(name)


def dtype_name(arr: np.ndarray) -> str:
    """A tensor's dtype name for array `arr` (text arrays are "string")."""
    return "string" if arr.dtype.kind in "OU" else arr.dtype.name


@dataclass(frozen=True, kw_only=True)
class NpuMatMul:
    """out = epilogue((a - a_zp) @ (w - w_zp) + bias), a: [..., M, K], w: [K, N] constant.

    - `w`, `bias`: names of constants in `LoweredModel.constants` (bias int32 [N] or None);
    - `a_zp`: scalar; `w_zp`: scalar or per-column tuple of length N;
    - `w_input`: `w` is no constant but a tensor computed at run time (attention's Q.K^T
      and P.V: both operands activations), [..., K, N] with the same leading (batch) dims
      as `a` or none; it is loaded into wmem from dram when the step runs (plain structure
      only, one zero point);
    - `a_zp_input`: a zero point computed at run time (dynamic quantization's
      DynamicQuantizeLinear): the name of a one-element tensor of `a_type` the instruction
      reads when it runs (then `a_zp` is 0 and unused); None: `a_zp` is the constant;
    - `a_type`, `w_type`: integer type names ("int8", "uint8", ...);
    - `post`: None (raw int32 accumulator), a `PostProcess`, or a tuple of N of them;
    - `structure`: scheduling structure "plain" | "grouped" | "tiled";
    - `tile`: an explicit (tm, tn, tk) tile to schedule with (None: codegen chooses:
      resident operands when they fit the target's memories, else the largest tiles
      that fit; see `npu_backend.schedule`);
    - `onnx_nodes`: the ONNX node names this step implements (for reports and ledger);
    - `compute`: the target compute unit whose capabilities apply ("MatMul" or "Conv");
    - `window`: a convolution's window (`prover.conv.Window`): then `a` is channels-last
      [N, *spatial, C], each output element's row is its patch (padding reads `a_zp`), `w` is
      [K_g, N] and `out` [N, *out_spatial, N] (`prover.conv.conv_acc`).
    """

    name: str
    a: str
    w: str
    out: str
    a_zp: int
    w_zp: int | tuple[int, ...]
    bias: str | None
    a_type: str
    w_type: str
    post: Post | None = None
    structure: str = "plain"
    onnx_nodes: tuple[str, ...] = ()
    compute: str = "MatMul"  # which compute unit's capabilities apply ("MatMul" | "Conv")
    tile: tuple[int, int, int] | None = None
    window: Window | None = None  # a conv over a window: `a` is channels-last [N, *sp, C]
    a_zp_input: str | None = None  # a run-time zero point (a one-element tensor of a_type)
    w_input: bool = False  # `w` is a run-time tensor [..., K, N], not a constant

    @property
    def fused(self) -> bool:
        """True when any column's epilogue carries a LUT or an activation function."""
        if self.post is None:
            return False
        posts = posts_but_scale(self.post)
        return any(p.lut is not None or p.function is not None for p in posts)

    def w_zp_columns(self, n0: int, n1: int) -> int | tuple[int, ...]:
        """The weight zero point(s) of output columns [n0, n1): a scalar is the same for all."""
        if np.ndim(self.w_zp) == 0:
            return int(self.w_zp)  # type: ignore[arg-type]
        return tuple(int(z) for z in self.w_zp[n0:n1])  # type: ignore[index]


@dataclass(frozen=True, kw_only=True)
class NpuLut:
    """Standalone activation: out = table[index(x)] for x of `in_type`."""

    name: str
    x: str
    out: str
    table: tuple[int, ...]
    in_type: str
    out_type: str
    index_order: str = "offset"
    onnx_nodes: tuple[str, ...] = ()
    function: str | None = None  # the activation kind (e.g. "sigmoid"); required on the NPU

    @staticmethod
    def from_params(
        name: str, x: str, out: str, lut: LutParams, function: str | None, onnx_nodes=()
    ) -> NpuLut:
        """The standalone activation of a complete LUT (a ValueError if a field is missing)."""
        table, in_type, out_type, order = lut.table, lut.in_type, lut.out_type, lut.index_order
        if table is None or in_type is None or out_type is None or order is None:
            raise ValueError(f"{name}: an incomplete LUT cannot be a standalone activation")
        return NpuLut(
            name=name,
            x=x,
            out=out,
            table=tuple(table),
            in_type=in_type,
            out_type=out_type,
            index_order=order,
            onnx_nodes=tuple(onnx_nodes),
            function=function,
        )

    @property
    def lut(self) -> LutParams:
        return LutParams(self.table, self.in_type, self.out_type, self.index_order)


@dataclass(frozen=True)
class NpuRequant:
    """Standalone requantization of an integer tensor (per-tensor, or a tuple per last-axis column)."""

    name: str
    x: str
    out: str
    requant: RequantParams | tuple[RequantParams, ...]
    onnx_nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class NpuClip:
    """Standalone integer clamp: out = min(max(x, lo), hi), stored as `dtype`."""

    name: str
    x: str
    out: str
    lo: int
    hi: int
    dtype: str
    onnx_nodes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class NpuEltwise:
    """out = [lut](npu_eltwise(a, b)) elementwise over numpy-broadcast `a` and `b`.

    `record` is the unit's float32 parameter record (`prover.eltwise.EltwiseParams`);
    `a_shape`/`b_shape` the operand shapes (what the unit's broadcast must read);
    `lut` an optional fused table (`function` names it) applied to the result.
    """

    name: str
    a: str
    b: str
    out: str
    record: EltwiseParams
    a_shape: tuple[int, ...] = ()
    b_shape: tuple[int, ...] = ()
    lut: LutParams | None = None
    function: str | None = None
    onnx_nodes: tuple[str, ...] = ()

    @property
    def out_type(self) -> str:
        if self.lut is not None and self.lut.out_type is not None:
            return self.lut.out_type
        return self.record.dtype


@dataclass(frozen=True)
class NpuMove:
    """Data movement on the NPU, a strided gather: `out` (shape `shape`, row-major) element
    with coordinates c reads `x`'s flat element `offset + sum_i c_i * strides[i]`. A Reshape,
    Flatten, Squeeze or Unsqueeze has row-major strides, a Transpose permuted ones
    (`npu_backend.moves`); the value of each element is unchanged, stored as `dtype`."""

    name: str
    x: str
    out: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    dtype: str
    onnx_nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class NpuConcat:
    """Data movement on the NPU: `out` = the inputs `xs` joined along `axis` (each input's
    elements copied in row-major order into its slab of `out`), stored as `dtype`."""

    name: str
    xs: tuple[str, ...]
    out: str
    axis: int
    dtype: str
    onnx_nodes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class NpuMaxPool:
    """The largest element of each window of channels-last `x` [N, *spatial, C] into `out`
    [N, *out_spatial, C] (`prover.pool.max_pool`: padding reads the type's minimum, never a
    window's maximum), on the `compute` unit ("Pool"), stored as `dtype`."""

    name: str
    x: str
    out: str
    window: Window
    dtype: str
    onnx_nodes: tuple[str, ...] = ()
    compute: str = "Pool"


@dataclass(frozen=True)
class HostKernel:
    """Elementwise integer op on the host: out = term(inputs...), stored as `out_dtype`.

    The variables of `term` are the names in `inputs`.
    """

    name: str
    inputs: tuple[str, ...]
    out: str
    term: Term
    out_dtype: str
    onnx_nodes: tuple[str, ...] = ()


# ONNX Runtime graph optimisation levels a host ONNX step may run at
ORT_LEVELS = ("off", "default")


@dataclass(frozen=True)
class HostOnnx:
    """An ONNX subgraph (serialized ModelProto bytes) run by ONNX Runtime on the host.

    `inputs`/`outputs` are the subgraph's graph input/output names (= tensor names).
    `output_specs` (optional) gives static shapes and dtypes of the outputs; needed
    when an NPU step consumes one of them. `ort_level` is the graph optimisation level
    ONNX Runtime runs the subgraph at: "off", or "default" (ORT's default session level,
    whose layout rewrites, such as NCHWc for float convs, depend on the CPU), so a host
    step computes what the reference session computes.
    """

    name: str
    model: bytes
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    output_specs: tuple[TensorSpec, ...] = ()
    onnx_nodes: tuple[str, ...] = ()
    ort_level: str = "off"


NpuStep = NpuMatMul | NpuLut | NpuRequant | NpuClip | NpuEltwise | NpuMove | NpuMaxPool | NpuConcat
HostStep = HostKernel | HostOnnx
Step = NpuStep | HostStep


def npu_reads(st: Step) -> tuple[str, ...]:
    """Every tensor NPU step `st` reads at run time (both eltwise operands, every concat
    input, a matmul's run-time zero point and run-time `w`); () for a host step."""
    if isinstance(st, NpuMatMul):
        run_time = (st.a_zp_input, st.w if st.w_input else None)
        return (st.a, *(x for x in run_time if x is not None))
    if isinstance(st, NpuLut | NpuRequant | NpuClip | NpuMove | NpuMaxPool):
        return (st.x,)
    if isinstance(st, NpuEltwise):
        return (st.a, st.b)
    if isinstance(st, NpuConcat):
        return tuple(st.xs)
    return ()


def step_reads(st: Step) -> tuple[str, ...]:
    """Every tensor step `st` reads at run time, host or NPU."""
    return tuple(st.inputs) if isinstance(st, HostKernel | HostOnnx) else npu_reads(st)


def step_writes(st: Step) -> tuple[str, ...]:
    """Every tensor step `st` writes."""
    return tuple(st.outputs) if isinstance(st, HostOnnx) else (st.out,)


@dataclass
class LoweredModel:
    """Inputs (graph inputs), outputs (tensor names), constants and steps in order."""

    inputs: list[TensorSpec]
    outputs: list[str]
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    # inputs whose leading (batch) dimension is symbolic in the model (compiler.batch)
    dynamic_batch: tuple[str, ...] = ()


def unfuse(step: NpuMatMul) -> list[Step]:
    """Split a fused MatMul into MatMul(requantize[+clip]) followed by a standalone NpuLut.

    The intermediate tensor is named `<out>.pre_act`. Steps without a LUT come back unchanged.
    A per-column epilogue must share one LUT across columns to be split.
    """
    if not step.fused:
        return [step]
    posts = posts_but_scale(step.post)
    luts = {(p.lut, p.function) for p in posts}
    if len(luts) != 1:
        raise ValueError(f"{step.name}: per-column LUTs differ; cannot split into one activation")
    lut, function = next(iter(luts))
    if lut is None:
        raise ValueError(f"{step.name}: activation {function!r} without a LUT cannot be split")
    inner: Post
    if isinstance(step.post, ColumnPosts):
        inner = step.post.like(step.post.first.without_lut())
    elif isinstance(step.post, tuple):
        inner = tuple(p.without_lut() for p in posts)
    else:
        inner = posts[0].without_lut()
    mid = f"{step.out}.pre_act"
    mm = replace(step, out=mid, post=inner)
    act = NpuLut.from_params(f"{step.name}.act", mid, step.out, lut, function, step.onnx_nodes)
    return [mm, act]


def unfuse_model(model: LoweredModel) -> LoweredModel:
    """The same model with every fused MatMul split by `unfuse`."""
    steps: list[Step] = []
    for s in model.steps:
        steps.extend(unfuse(s) if isinstance(s, NpuMatMul) else [s])
    return LoweredModel(list(model.inputs), list(model.outputs), dict(model.constants), steps)


__all__ = [
    "STRUCTURES",
    "TensorSpec",
    "NpuMatMul",
    "NpuLut",
    "NpuRequant",
    "NpuClip",
    "NpuEltwise",
    "NpuMove",
    "NpuMaxPool",
    "NpuConcat",
    "HostKernel",
    "HostOnnx",
    "NpuStep",
    "HostStep",
    "Step",
    "LoweredModel",
    "PostProcess",
    "RequantParams",
    "LutParams",
    "unfuse",
    "unfuse_model",
    "npu_reads",
    "step_reads",
    "step_writes",
]
