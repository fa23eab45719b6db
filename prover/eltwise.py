"""Two-activation QLinearAdd / QLinearMul as kernel primitives: ORT's reference and the NPU's unit.

Two primitives over two 8-bit operands `a`, `b` (one element of each, after numpy
broadcasting; the element function does not depend on the position, only on the
span mode ORT's broadcast loop picks for the node's shapes):

- `qlinear_binary` (the reference): ONNX Runtime's com.microsoft QLinearAdd / QLinearMul
  as MLAS computes it (`prover.qlinear_binary`): scales and zero points as the node
  gives them, the span mode, and the reference profile's FMA flag;
- `npu_eltwise` (the implementation): the NPU's two-input elementwise unit, which reads a
  parameter record of float32 values the backend precomputes (`EltwiseParams`) and
  evaluates one fixed float32 formula with the target's FMA flag and operand order.

Neither has a compact bit-vector form (float32 products and roundings): an obligation
between them is decided by enumerating its 65,536 operand pairs; the symbolic domains
decline (`NotApplicable`) so the portfolio moves on to enumeration.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .domain import Domain, KernelError, NumpyDomain
from .errors import NotApplicable
from .inttypes import int_type
from .mlas import fma32
from .qlinear_binary import (
    BinaryOp,
    QLinearBinaryParams,
    SpanMode,
    cvtps_epi32,
    pack_saturate,
    qlinear_binary_pairs,
)

F32 = np.float32


def _numpy_only(d: Domain, what: str) -> None:
    if not isinstance(d, NumpyDomain):
        raise NotApplicable(f"{what} is float32 arithmetic: decided by enumeration only")


def reference_value(d: Domain, a: Any, b: Any, **p: Any) -> Any:
    """`qlinear_binary` primitive: ORT's kernel on one element of A and one of B."""
    _numpy_only(d, "ONNX Runtime's QLinearAdd/QLinearMul")
    params = QLinearBinaryParams(
        a_scale=p["a_scale"], a_zp=p["a_zp"], b_scale=p["b_scale"], b_zp=p["b_zp"],
        c_scale=p["c_scale"], c_zp=p["c_zp"], dtype=p["dtype"],
    )  # fmt: skip
    t = int_type(p["dtype"])
    a64, b64 = np.broadcast_arrays(
        np.clip(np.asarray(a, dtype=np.int64), t.min, t.max),
        np.clip(np.asarray(b, dtype=np.int64), t.min, t.max),
    )
    return qlinear_binary_pairs(
        p["binary"], a64, b64, params, mode=SpanMode(p["mode"]), fma=bool(p["fma"])
    )


def in_type(d: Domain, a: Any, b: Any, **p: Any) -> Any:
    """Both operands lie in the 8-bit type (the precondition of both primitives)."""
    t = int_type(p["dtype"])
    return d.land(d.land(a >= t.min, a <= t.max), d.land(b >= t.min, b <= t.max))


@dataclass(frozen=True, kw_only=True)
class EltwiseParams:
    """The NPU elementwise unit's parameter record (float32 values stored as Python floats).

    Add: `v = p*r_p + (q*r_q + fixed)` where `p` is operand A when `p_is_a` (else B);
    with `fma` both products are fused into their sums (one rounding each), else each
    product and sum is rounded and the order is `(fixed + p*r_p) + q*r_q` when
    `fixed_first`. Mul: `v = f32(f32((a - a_zp)(b - b_zp)) * ratio) + c_zp`. Then round
    half to even, saturate to int16 and to `dtype`.
    """

    binary: str  # "add" | "mul"
    dtype: str
    r_p: float = 0.0
    r_q: float = 0.0
    fixed: float = 0.0
    p_is_a: bool = True
    fixed_first: bool = False
    fma: bool = True
    ratio: float = 0.0
    a_zp: int = 0
    b_zp: int = 0
    c_zp: int = 0

    def __post_init__(self) -> None:
        if self.binary not in ("add", "mul"):
            raise KernelError(f"npu_eltwise computes add or mul, not {self.binary!r}")
        t = int_type(self.dtype)
        for name in ("a_zp", "b_zp", "c_zp"):
            if not t.contains(int(getattr(self, name))):
                raise KernelError(f"npu_eltwise {name} {getattr(self, name)} outside {t.name}")
        for name in ("r_p", "r_q", "fixed", "ratio"):
            if not np.isfinite(F32(getattr(self, name))):
                raise KernelError(f"npu_eltwise {name} is not a finite float32")

    def params(self) -> dict[str, Any]:
        """The record as term parameters (plain JSON values)."""
        return {k: (float(v) if isinstance(v, float) else v) for k, v in asdict(self).items()}

    @staticmethod
    def of(
        binary: BinaryOp | str, p: QLinearBinaryParams, mode: SpanMode, *, fma: bool
    ) -> EltwiseParams:
        """The record the backend computes from a node's scales and zero points.

        `fma` is the target's (how its unit evaluates the add); the ratios are MLAS's
        (`f32(s / s_c)`) so the unit needs no division; without FMA the summation order
        the record selects is the one ORT's span mode uses.
        """
        op = BinaryOp(binary)
        if op is BinaryOp.MUL:
            ratio = F32(F32(F32(p.a_scale) * F32(p.b_scale)) / F32(p.c_scale))
            return EltwiseParams(
                binary="mul", dtype=p.dtype, ratio=float(ratio), a_zp=p.a_zp, b_zp=p.b_zp,
                c_zp=p.c_zp,
            )  # fmt: skip
        p_is_a = SpanMode(mode) is not SpanMode.A_SCALAR
        (ps, pz), (qs, qz) = (
            ((p.a_scale, p.a_zp), (p.b_scale, p.b_zp))
            if p_is_a
            else ((p.b_scale, p.b_zp), (p.a_scale, p.a_zp))
        )
        r_p = F32(F32(ps) / F32(p.c_scale))
        r_q = F32(F32(qs) / F32(p.c_scale))
        zp_terms = (
            fma32(r_p, F32(pz), F32(r_q * F32(qz)))
            if fma
            else F32(F32(r_p * F32(pz)) + F32(r_q * F32(qz)))
        )
        fixed = F32(F32(p.c_zp) - F32(zp_terms))
        return EltwiseParams(
            binary="add", dtype=p.dtype, r_p=float(r_p), r_q=float(r_q), fixed=float(fixed),
            p_is_a=p_is_a, fixed_first=SpanMode(mode) is SpanMode.GENERAL,
            fma=bool(fma), a_zp=p.a_zp, b_zp=p.b_zp, c_zp=p.c_zp,
        )  # fmt: skip


def npu_value(d: Domain, a: Any, b: Any, **p: Any) -> Any:
    """`npu_eltwise` primitive: the NPU unit's formula on one element of A and one of B."""
    _numpy_only(d, "the NPU's float32 elementwise unit")
    e = EltwiseParams(**p)
    t = int_type(e.dtype)
    a64, b64 = np.broadcast_arrays(
        np.clip(np.asarray(a, dtype=np.int64), t.min, t.max),
        np.clip(np.asarray(b, dtype=np.int64), t.min, t.max),
    )
    if e.binary == "mul":
        prod = (a64 - e.a_zp) * (b64 - e.b_zp)
        v = prod.astype(F32) * F32(e.ratio) + F32(e.c_zp)  # float32 throughout
        return pack_saturate(cvtps_epi32(v), t)
    pf, qf = (a64, b64) if e.p_is_a else (b64, a64)
    pf, qf = pf.astype(F32), qf.astype(F32)
    r_p, r_q, fixed = F32(e.r_p), F32(e.r_q), F32(e.fixed)
    if e.fma:
        v = fma32(pf, r_p, fma32(qf, r_q, fixed))
    elif e.fixed_first:
        v = ((fixed + (pf * r_p).astype(F32)).astype(F32) + (qf * r_q).astype(F32)).astype(F32)
    else:
        v = ((pf * r_p).astype(F32) + ((qf * r_q).astype(F32) + fixed).astype(F32)).astype(F32)
    return pack_saturate(cvtps_epi32(v), t)
