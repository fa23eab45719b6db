"""Dynamic quantization's fused matmuls, as ONNX Runtime's default session runs them:
com.microsoft MatMulIntegerToFloat and DynamicQuantizeMatMul (what ORT's
`MatMulIntegerToFloatFusion` and `DynamicQuantizeMatMulFusion` make of
`DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul -> Add`).

Each is split where its kernel's computation splits: the exact integer matmul, whose
activation zero point is computed at run time, is an IR `matmul` the NPU runs reading the
zero point as an operand (`a_zp_input`); what is float stays on the host as ORT computes
it, measured bit for bit against the fused kernels (tests/test_dynamic_matmul.py):
- DynamicQuantizeMatMul's own quantization of its float input is ORT's
  DynamicQuantizeLinear (same scale, zero point and codes);
- the epilogue is `float32(acc) * (a_scale * b_scale) + bias`, a float32 multiply then a
  float32 add (no fused multiply-add), per column where b_scale is.

Versions read: both com.microsoft version 1. A form the split does not cover (weights not a
constant 2-D 8-bit tensor, a scale or zero point shape ORT's kernel stops on) runs on the
host as the fused op it is.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh

from compiler.errors import FrontendError
from compiler.ir.graph import Value

from ..context import BuildContext
from ..elem_types import EIGHT_BIT
from ..registry import MS_DOMAIN, converter
from .integer_matmul import check_acc, column_param, emit_matmul, run_time_zp, weights


@converter(MS_DOMAIN, "MatMulIntegerToFloat", since=1, until=1, attributes=())
def matmul_integer_to_float(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """(A, B, a_scale, b_scale, a_zero_point?, b_zero_point?, bias?): the integer matmul on
    the NPU, the float epilogue on the host."""
    _split(ctx, n, quantize=False)


@converter(MS_DOMAIN, "DynamicQuantizeMatMul", since=1, until=1, attributes=())
def dynamic_quantize_matmul(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """(A float, B, b_scale, b_zero_point?, bias?): DynamicQuantizeLinear(A) on the host,
    the integer matmul on the NPU, the float epilogue on the host."""
    _split(ctx, n, quantize=True)


def _opt(n: onnx.NodeProto, idx: int) -> str:
    return n.input[idx] if idx < len(n.input) else ""


def _split(ctx: BuildContext, n: onnx.NodeProto, *, quantize: bool) -> None:
    ctx.attrs(n)
    try:
        plan = _read(ctx, n, quantize)
    except FrontendError as e:
        if e.bad_input:
            raise
        ctx.unsupported(n, str(e).split(": ", 1)[-1])
        return
    _emit(ctx, n, quantize, *plan)


def _read(ctx: BuildContext, n: onnx.NodeProto, quantize: bool):
    """Everything checked before anything is emitted: (weights, w_zp, a_type, a_zp,
    zero point input, scale inputs, bias input)."""
    b_idx, bs_idx, bz_idx, bias_idx = (1, 2, 3, 4) if quantize else (1, 3, 5, 6)
    if quantize:
        x = ctx.value(n, n.input[0])
        if x.dtype != "float32":
            raise ctx.fail(n, f"input A has type {x.dtype}; DynamicQuantizeMatMul's is float32")
        at, a_zp, zp_in = "uint8", 0, None
    else:
        at = ctx.expect_dtype(n, n.input[0], EIGHT_BIT)
        ctx.value(n, n.input[0])
        zp_in = run_time_zp(ctx, n, 4, at)
        a_zp = 0 if zp_in else int(ctx.scalar(n, 4, "a_zero_point", default=0))
        a_scale = _opt(n, 2)
        if a_scale in ctx.consts and ctx.consts[a_scale].size != 1:
            raise ctx.fail(n, "a_scale must be a scalar (per-tensor)")
    w = weights(ctx, n, b_idx)
    N = w.shape[1]
    w_zp = column_param(ctx, n, bz_idx, "b_zero_point", N, default=0)
    bs = ctx.const(n, bs_idx, "b_scale")
    if bs.dtype != np.float32 or bs.size not in (1, N):
        raise ctx.fail(n, f"b_scale must be float32 with 1 or {N} values")
    bias = _opt(n, bias_idx)
    if bias:
        b = ctx.const(n, bias_idx, "bias")
        if b.dtype != np.float32 or b.shape != (N,):
            raise ctx.fail(n, f"bias must be float32 of shape [{N}], got {b.dtype}{list(b.shape)}")
    check_acc(ctx, n, w, w_zp, at, None if (quantize or zp_in) else a_zp)
    return w, w_zp, at, a_zp, zp_in, b_idx, bs_idx, bz_idx, bias


def _emit(ctx, n, quantize, w, w_zp, at, a_zp, zp_in, b_idx, bs_idx, bz_idx, bias) -> None:
    label = n.name or n.output[0]
    a_name, a_scale = n.input[0], _opt(n, 2)
    if quantize:
        q, a_scale, zp_in = (ctx.new_name(f"{label}.{k}") for k in ("quantized", "scale", "zp"))
        dql = oh.make_node("DynamicQuantizeLinear", [a_name], [q, a_scale, zp_in], name=q)
        ctx.host(
            [dql],
            placement=f"{ctx.label(n)}: DynamicQuantizeLinear runs on the host (a float "
            "min/max over the whole tensor), as ONNX Runtime's kernel quantizes its input",
        )
        a_name = q
    a = ctx.values[a_name]
    if len(a.shape) < 2 or a.shape[-1] != w.shape[0]:
        raise ctx.fail(n, f"input shape {list(a.shape)} does not match weights {list(w.shape)}")
    acc = Value(ctx.new_name(f"{label}.acc"), "int32", a.shape[:-1] + (w.shape[1],))
    # the zero point as MatMulInteger reads it: run-time, a constant as given, or none
    zp_arg = zp_in or ("" if quantize else _opt(n, 4))
    mm_inputs = [a_name, n.input[b_idx], zp_arg, _opt(n, bz_idx)]
    while mm_inputs and not mm_inputs[-1]:
        mm_inputs.pop()
    mm = oh.make_node("MatMulInteger", mm_inputs, [acc.name], name=acc.name)
    consts = {i: ctx.consts[i] for i in mm_inputs if i in ctx.consts}
    emit_matmul(
        ctx, n, a_name, acc, w=w, a_zp=a_zp, w_zp=w_zp, a_type=at, bias=None, requant=None,
        **({"a_zp_input": zp_in} if zp_in else {}),
        host_form={"nodes": [mm.SerializeToString()], "consts": consts},
    )  # fmt: skip
    f, mult = ctx.new_name(f"{label}.acc_float"), ctx.new_name(f"{label}.multiplier")
    last = n.output[0]
    scaled = ctx.new_name(f"{label}.scaled") if bias else last
    nodes = [
        oh.make_node("Cast", [acc.name], [f], to=TP.FLOAT, name=f),
        oh.make_node("Mul", [a_scale, n.input[bs_idx]], [mult], name=mult),
        oh.make_node("Mul", [f, mult], [scaled], name=scaled),
    ]
    if bias:
        nodes.append(oh.make_node("Add", [scaled, bias], [last], name=label))
    ctx.host(
        nodes,
        placement=f"{ctx.label(n)}: its float epilogue (float32(acc) * (a_scale * b_scale) "
        "+ bias) runs on the host, as ONNX Runtime's kernel computes it",
    )
