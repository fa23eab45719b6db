"""Builders of typical obligations (used by tests, the benchmark and as examples)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .inttypes import INT8
from .lut import LutSpec, build_lut, reorder_table
from .matmul import accumulator_range
from .obligation import LiftSpec, Obligation
from .terms import Term, Var, op


def sigmoid_table(in_scale: float = 0.0625) -> tuple[int, ...]:
    t = build_lut(
        LutSpec(
            function="sigmoid",
            in_scale=in_scale,
            in_zp=0,
            in_type="int8",
            out_scale=1 / 256,
            out_zp=-128,
            out_type="int8",
        )
    )
    return tuple(int(v) for v in t)


def twos_complement(table: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(v) for v in reorder_table(table, INT8, "offset", "twos_complement"))


def lut_of(x: Term, table: Sequence[int], order: str = "offset") -> Term:
    return op("lut", x, table=tuple(table), in_type="int8", index_order=order)


def requant(
    kind: str,
    x: Term,
    *,
    multiplier: int = 0,
    shift: int = 0,
    scale: float = 0.0,
    zp: int = 0,
    out: str = "int8",
) -> Term:
    """`requant_double` / `requant_single` (multiplier, shift) or `requant_float` (scale)."""
    if kind == "requant_float":
        return op(kind, x, scale=scale, zp=zp, out=out)
    return op(kind, x, multiplier=multiplier, shift=shift, zp=zp, out=out)


def lift_for(
    weights: Sequence[int],
    x_type: str = "int8",
    x_zp: int = 0,
    w_zp: int = 0,
    bias: int = 0,
    var: str = "acc",
) -> tuple[LiftSpec, tuple[int, int]]:
    """LiftSpec of one weights column and the exact accumulator range it implies."""
    w = np.asarray(weights, dtype=np.int64).reshape(-1, 1)
    from .inttypes import int_type

    r = accumulator_range(w, w_zp, int_type(x_type), x_zp, None if not bias else [bias])
    spec = LiftSpec(var, tuple(int(v) for v in w[:, 0]), w_zp, x_zp, x_type, bias)
    return spec, r.overall


def index_map_flatten(m: int, n: int, transposed: bool = False) -> Obligation:
    """(i, j) -> i*n + j -> (flat // n, flat % n) is the identity; the transposed read is not.

    With `transposed`, the after side reads (flat % n, flat // n) instead (needs m == n
    for the ranges to match): a hidden transpose.
    """
    i, j = Var("i"), Var("j")
    flat = op("add", op("mul_const", i, c=n), j)
    back = (op("floordiv_const", flat, c=n), op("mod_const", flat, c=n))
    after = back[::-1] if transposed else back
    return Obligation("index_map", (i, j), after, {"i": (0, m - 1), "j": (0, n - 1)})
