"""The registry of kernel primitives that terms (and so obligations) are built from.

Each entry names one kernel function and, where C semantics leave a case
undefined, the precondition under which the function has a meaning.
Parameters are plain JSON values (ints, floats, strings, tuples of ints) so a
term has a canonical, hashable form.

Preconditions and sides (the rule every decision procedure implements:
segments, enumerate, the SMT encoding, and concrete replay). An obligation says `before` (the reference: the ONNX model's
meaning) equals `after` (the implementation: the NPU's form). A precondition
met while evaluating `after` is an obligation: a reachable input that violates
it refutes the rewrite (the implementation's result there is undefined, and
"proven" would be a claim about a value the hardware need not produce). A
precondition met while evaluating `before` may be assumed, and only because
the reference itself has no meaning there (C undefined behaviour in the
gemmlowp/TFLite reference, a value outside the type the ONNX tensor holds):
no reference output exists to compare with. Each primitive's `requires`
says what its precondition is; its `doc` says why assuming it on the
reference side is sound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import eltwise as _elt
from . import lut as _lut
from . import matmul as _mm
from . import requant as _rq
from .domain import Domain, KernelError
from .inttypes import int_type, saturate, wrap

# Part of every obligation's hash: bump it whenever the meaning of any primitive
# changes, so that proofs made under the old meaning are never served again.
SEMANTICS_VERSION = "2"


@dataclass(frozen=True)
class Primitive:
    """A kernel function usable in terms: `fn(d, *args, **params)`.

    `precondition(d, *args, **params)` (a domain boolean) is where `fn` has a
    meaning; `requires` states it in words. Obligation on the `after` side,
    assumption on the `before` side (module docstring).
    """

    name: str
    fn: Callable[..., Any]
    precondition: Callable[..., Any] | None = None
    doc: str = ""
    requires: str = ""
    # False: no bit-vector form (float32 arithmetic); `fn` raises NotApplicable in a
    # symbolic domain, so only enumeration decides obligations using it
    symbolic: bool = True


def _requant_double(d: Domain, acc, *, multiplier, shift, zp, out):
    return _rq.requant_double(d, acc, multiplier, shift, zp, int_type(out))


def _requant_double_pre(d: Domain, acc, *, multiplier, shift, zp, out):
    return _rq.mbqm_precondition(d, acc, shift)


def _requant_single(d: Domain, acc, *, multiplier, shift, zp, out):
    return _rq.requant_single(d, acc, multiplier, shift, zp, int_type(out))


def _requant_single_pre(d: Domain, acc, *, multiplier, shift, zp, out):
    return _rq.single_round_precondition(d, acc, multiplier, shift)


def _requant_float(d: Domain, acc, *, scale, zp, out):
    return _rq.requant_float(d, acc, scale, zp, int_type(out))


def _requant_float_pre(d: Domain, acc, *, scale, zp, out):
    return _rq.int32_precondition(d, acc)


def _lut_apply(d: Domain, x, *, table, in_type, index_order):
    # Clamped so evaluating where the precondition fails stays total (its value is
    # never used: the precondition decides those points).
    t = int_type(in_type)
    return _lut.apply_lut(d, table, d.clamp(x, t.min, t.max), t, index_order)


def _lut_pre(d: Domain, x, *, table, in_type, index_order):
    t = int_type(in_type)
    return d.land(x >= t.min, x <= t.max)


def _clip(d: Domain, x, *, lo, hi):
    if lo > hi:
        raise KernelError(f"clip with min {lo} > max {hi}")
    return d.clamp(x, lo, hi)


def _floordiv_const(d: Domain, x, *, c):
    c = int(c)
    if c <= 0 or c & (c - 1):
        # Only powers of two have a shared exact form in both domains; general
        # divisors go through the symbolic-friendly identity below.
        if c <= 0:
            raise KernelError(f"division by non-positive constant {c}")
        return d.floordiv(x, c)
    return d.shr(x, c.bit_length() - 1)


def _mod_const(d: Domain, x, *, c):
    return x - _floordiv_const(d, x, c=c) * int(c)


def _dot(d: Domain, *xs, weights, x_zp, w_zp, bias=0):
    return _mm.dot(d, xs, weights, x_zp, w_zp, bias)


PRIMITIVES: dict[str, Primitive] = {
    p.name: p
    for p in (
        Primitive("add", lambda d, a, b: a + b, doc="a + b"),
        Primitive("sub", lambda d, a, b: a - b, doc="a - b"),
        Primitive("add_const", lambda d, a, *, c: a + int(c), doc="a + c"),
        Primitive("mul_const", lambda d, a, *, c: a * int(c), doc="a * c"),
        Primitive("clip", _clip, doc="min(max(x, lo), hi)"),
        Primitive(
            "saturate",
            lambda d, x, *, type: saturate(d, x, int_type(type)),
            doc="clamp into type; total (no precondition)",
        ),
        Primitive(
            "wrap",
            lambda d, x, *, type: wrap(d, x, int_type(type)),
            doc="two's complement wrap into type; total (no precondition)",
        ),
        Primitive(
            "requant_double",
            _requant_double,
            _requant_double_pre,
            doc="saturate(MBQM(acc, M, s) + zp). Reference side: assumed; the left shift "
            "overflowing int32 is undefined behaviour in gemmlowp/TFLite's C, so the "
            "reference has no value there. NPU side: an obligation (the hardware's result "
            "is undefined).",
            requires="acc * 2^max(shift,0) fits int32",
        ),
        Primitive(
            "requant_single",
            _requant_single,
            _requant_single_pre,
            doc="saturate(single_round(acc, M, s) + zp). Reference side: assumed; TFLite "
            "DCHECKs an int32 input and result, beyond which its C has no defined value. "
            "NPU side: an obligation.",
            requires="acc is int32 and (acc*M + 2^(30-s)) >> (31-s) fits int32",
        ),
        Primitive(
            "requant_float",
            _requant_float,
            _requant_float_pre,
            doc="saturate(round_half_even(float32(acc) * scale) + zp). Reference side: "
            "assumed; ONNX defines QLinearMatMul's accumulator as int32, and an overflowing "
            "int32 sum has no value in the spec. NPU side: an obligation (the accumulator "
            "register is int32).",
            requires="acc is int32",
        ),
        Primitive(
            "lut",
            _lut_apply,
            _lut_pre,
            doc="table[index(x)], x in in_type. Reference side: assumed; the ONNX tensor "
            "feeding the activation holds in_type values only, so no reference input lies "
            "outside. NPU side: an obligation (an index outside the table reads memory "
            "that is not the table).",
            requires="x lies in in_type",
        ),
        Primitive(
            "dot",
            _dot,
            doc="sum (x_k - x_zp)(w_k - w_zp) + bias, the exact integer; no precondition of its "
            "own: an accumulator beyond int32 is caught by the requantizer consuming it",
        ),
        Primitive(
            "qlinear_binary",
            _elt.reference_value,
            _elt.in_type,
            doc="ONNX Runtime's com.microsoft QLinearAdd/QLinearMul of one element of A and "
            "one of B (MLAS's float32 kernel for the node's span mode and the reference's FMA "
            "flag). Reference side: assumed; the ONNX tensors hold dtype values only.",
            requires="a and b lie in dtype",
            symbolic=False,
        ),
        Primitive(
            "npu_eltwise",
            _elt.npu_value,
            _elt.in_type,
            doc="The NPU's two-input elementwise unit on its float32 parameter record "
            "(`prover.eltwise.EltwiseParams`). NPU side: an obligation (operands outside "
            "dtype are not what its 8-bit inputs hold).",
            requires="a and b lie in dtype",
            symbolic=False,
        ),
        Primitive("floordiv_const", _floordiv_const, doc="floor(x / c), c > 0"),
        Primitive("mod_const", _mod_const, doc="x - c * floor(x / c), c > 0"),
    )
}


def primitive(name: str) -> Primitive:
    try:
        return PRIMITIVES[name]
    except KeyError:
        raise KernelError(f"unknown primitive {name!r}; known: {sorted(PRIMITIVES)}") from None
