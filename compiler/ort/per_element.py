"""Region models whose ONNX Runtime kernels compute every element by one function.

A unary region's table is ORT's output on every code only together with the fact that ORT
computes each element independently of its position (`region_table`'s position check
establishes it by probing). For some kernels the fact follows from their construction in
ORT's source, so the kernel is modelled instead of probed: a region whose graph, as ORT's
session runs it, holds only such kernels is its table in one run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from .errors import ort_errors
from .options import session_level, session_options

# ONNX Runtime CPU kernels that compute every output element from the same element of their
# inputs by one function, whatever the tensor's length, offset or split over threads (facts
# from ORT's source: `contrib_ops/cpu/quantization` and MLAS):
# - com.microsoft QLinearSigmoid: `QLinearLookupBase` builds a 256-entry table from the
#   scales and zero points, and `QLinearLookupTableTransform` looks each element up;
# - com.microsoft QLinearMul: `MlasQLinearMul` computes 16 elements a step; a tail shorter
#   than 16 is copied into a zero-padded buffer and goes through the same vector code (SSE2
#   and NEON kernels), and the portable kernel is one loop of one formula.
# A region whose graph as ORT runs it holds only these, reading only its input, each other's
# outputs and one-element constants, is a function of the code by the kernels' construction
# (the kernel is modelled, not probed): the table of one run on every code is its table.
PER_ELEMENT = frozenset({("com.microsoft", "QLinearSigmoid"), ("com.microsoft", "QLinearMul")})

# Float kernels with the same fact on x86-64 hosts only (read for MLAS's AMD64 dispatch and
# ORT's x86-64 build, whose portable C++ has no fused multiply-add to contract into; on
# AArch64 a compiler may fuse a scalar tail's `a * x + b` and not the vector body's):
# - DequantizeLinear, per tensor: `float(int32(x) - zp) * scale`, one exact conversion and
#   one rounding, in the SSE2 kernel's vector body and its scalar tail alike;
# - QuantizeLinear, per tensor: x / scale, clamped, rounded to nearest even, plus zp; the
#   SSE2 kernel's tail puts each element in a vector lane through the same code, and the
#   AVX-512F kernel's tail is a masked vector through its body's instructions (in older
#   sources, the SSE2 kernel);
# - Sigmoid: `MlasComputeLogistic`; the FMA3 kernel masks its tail (`vmaskmovps`) through the
#   same instructions as its body, the SSE2 kernel's scalar tail repeats its multiply-adds
#   in the same order (unfused, as its vector body);
# - HardSigmoid: Eigen's `min(max(alpha * x + beta, 0), 1)`, a multiply then an add per
#   element in its packets and its scalar tail;
# - Mul, Div, Add: one IEEE product, quotient or sum per element (Eigen's array operations,
#   or `MlasEltwiseAdd`, whose scalar tail adds as its vector body does; the MLAS
#   `MlasEltwiseMul` that fused SiLU/QuickGelu kernels call is not this op's kernel, and a
#   session that fuses into those runs com.microsoft ops, which stay probed);
# - Pow by a one-element exponent: `x * x`, `x * x * x` or `std::pow(x, y)` per element in
#   one `std::transform` (a vectorized loop and its remainder multiply in the same order).
# Their element type is pinned by `_float32_constants`: float32 values between 8-bit codes.
PER_ELEMENT_X86_64 = PER_ELEMENT | frozenset(
    ("", op)
    for op in (
        "DequantizeLinear",
        "QuantizeLinear",
        "Sigmoid",
        "HardSigmoid",
        "Mul",
        "Div",
        "Add",
        "Pow",
    )
)

# On x86-64 hosts where MLAS dispatches its AVX2/FMA3 kernels (the CPU has both):
# - Erf: `MlasErfKernelFma3` runs its last 1-8 elements through its body's instructions
#   under a mask (`vmaskmovps`); the portable kernel's scalar tail fuses its multiply-adds
#   (`fmaf`) where its vector body does not, so without FMA3 an Erf region is probed;
# - Tanh: `MlasComputeTanhF32KernelFma3` masks its last 1-7 elements through its body's
#   instructions too;
# - com.microsoft QLinearAdd: `MlasQLinearAddKernelAvx2Helper` computes every 32-element
#   block, the last one too, by the same vector code and stores the tail's lanes.
# A transformer's GELU as ORT runs it (DequantizeLinear, Div, Erf or Pow and Tanh,
# QuantizeLinear, QLinearAdd, QLinearMul) is then one run.
PER_ELEMENT_FMA3 = PER_ELEMENT_X86_64 | frozenset(
    {("", "Erf"), ("", "Tanh"), ("com.microsoft", "QLinearAdd")}
)
_X86_64 = frozenset({"x86_64", "amd64"})


def modelled_kernels(
    machine: str | None = None, cpu_flags: frozenset[str] | None = None
) -> frozenset[tuple[str, str]]:
    """The (domain, op) kernels modelled as per-element on a host of `machine`
    (`platform.machine()` by default) whose CPU has `cpu_flags` (this host's by default)."""
    import platform

    if (machine or platform.machine()).lower() not in _X86_64:
        return PER_ELEMENT
    flags = host_cpu_flags() if cpu_flags is None else cpu_flags
    return PER_ELEMENT_FMA3 if {"avx2", "fma"} <= flags else PER_ELEMENT_X86_64


def host_cpu_flags() -> frozenset[str]:
    """This CPU's feature flags as Linux lists them (`/proc/cpuinfo`); empty where that
    cannot be read (then no kernel that needs a flag is modelled)."""
    global _FLAGS
    if _FLAGS is None:
        try:
            with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
                line = next((ln for ln in f if ln.startswith("flags")), "")
        except OSError:
            line = ""
        _FLAGS = frozenset(line.partition(":")[2].split())
    return _FLAGS


_FLAGS: frozenset[str] | None = None


_PER_ELEMENT: dict[tuple[bytes, str], bool] = {}  # (model, level) -> runs_per_element
_READ: tuple[bytes, str, Any] | None = None  # the last session read back, until taken


def read_session(blob: bytes, level: str) -> Any:
    """The session `runs_per_element` last made to read back `blob`'s graph at `level`, or
    None; given once (the one run of a modelled region uses it instead of a new one)."""
    global _READ
    if _READ is None or _READ[1] != level or (_READ[0] is not blob and _READ[0] != blob):
        return None
    sess, _READ = _READ[2], None
    return sess


MAX_MODELS = 512


def runs_per_element(blob: bytes, level: str) -> bool:
    """Whether the graph ORT's session at `level` runs for model `blob` (its own rewrite
    of it, read back) has only `PER_ELEMENT` kernels whose constant inputs hold one element
    each (no constant varies with the position). False: the position check probes it."""
    key = (blob, level)
    if key not in _PER_ELEMENT:
        if len(_PER_ELEMENT) >= MAX_MODELS:
            _PER_ELEMENT.clear()
        _PER_ELEMENT[key] = _runs_per_element(blob, level)
    return _PER_ELEMENT[key]


def _runs_per_element(blob: bytes, level: str) -> bool:
    import os
    import tempfile

    import onnxruntime as ort

    fd, path = tempfile.mkstemp(suffix=".onnx")
    os.close(fd)
    try:
        # ORT's default thread count, as the one run's session: it serves that run too
        so = session_options(session_level(level), 0)
        so.optimized_model_filepath = path
        sess = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
        g = onnx.load(path).graph
    except ort_errors():
        return False
    finally:
        os.unlink(path)
    sizes = {t.name: int(np.prod(t.dims)) for t in g.initializer}
    outs = {o.name for o in g.output}
    kernels = modelled_kernels()
    ends = {a.type for a in sess.get_inputs() + sess.get_outputs()}
    modelled = (
        ends <= _CODES
        and _float32_constants(g)
        and all(
            (n.domain or "", n.op_type) in kernels and all(sizes.get(i, 1) == 1 for i in n.input)
            for n in g.node
            # a merged model's own outputs: the regions' outputs side by side (`merged_model`)
            if not (n.op_type == "Concat" and (n.domain or "") == "" and set(n.output) <= outs)
        )
    )
    if modelled:  # kept for the one run; a probed region's sessions are its own
        global _READ
        _READ = (blob, level, sess)
    return modelled


_CODES = frozenset({"tensor(uint8)", "tensor(int8)"})
_CONSTANTS = frozenset({onnx.TensorProto.UINT8, onnx.TensorProto.INT8, onnx.TensorProto.FLOAT})


def _float32_constants(g: onnx.GraphProto) -> bool:
    """Float32 or 8-bit constants only: with 8-bit codes in and out, every value between is
    float32 or an 8-bit code (a float16 scale would make the float kernels float16 ones)."""
    return all(t.data_type in _CONSTANTS for t in g.initializer)
