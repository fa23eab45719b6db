"""uint8 x int8 accumulation with int16 pair saturation (`Accumulation.PAIR_SATURATING_INT16`).

On x86 CPUs without VNNI, ONNX Runtime's MLAS u8s8 GEMM multiplies the *raw* uint8
activations by the *raw* int8 weights with `vpmaddubsw`: the two products of each
adjacent pair (k = 2i, 2i+1) are added with int16 saturation, and the int16 pair sums
are then added exactly in int32 (`vpmaddwd` with ones). K is padded with zeros to a
multiple of the packing width and the K slices are even, so the pairs are always
(2i, 2i+1) of the whole row; an odd K's last product stands alone (|255 * -128| fits
int16, so it never saturates). Zero points are applied afterwards, exactly, from the
row sums of A and the column sums of B:

    acc = sum_i sat16(a_2i w_2i + a_2i+1 w_2i+1) - w_zp * sum_k a_k - a_zp * sum_k w_k
          + K a_zp w_zp + bias

which is the exact accumulator plus `sum_i (sat16(p_i) - p_i)`. A pair can saturate
for some uint8 row iff 255 times the sum of its positive weights exceeds 32767, or
255 times the sum of its negative weights is below -32768; that is an exact interval
question on the constant weights, decided per column here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .domain import KernelError
from .errors import LiftError
from .lift import lift_row
from .matmul import matmul_acc
from .obligation import LiftSpec
from .uniq import unique

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
U8_MAX = 255
_CHUNK_PAIRS = 64  # pairs per vectorised step (bounds the [M, pairs, N] temporary)
_MAX_CANDIDATES = 1 << 20  # accumulator values tried per witness shape


def _padded_pairs(w: np.ndarray, dtype: type[np.signedinteger] = np.int64) -> np.ndarray:
    """Raw weights [K, N] as [K/2 (rounded up), 2, N] of `dtype`, padded with a zero row for
    odd K."""
    w64 = np.asarray(w, dtype=dtype)
    if w64.ndim != 2:
        raise KernelError(f"weights must be [K, N], got shape {w64.shape}")
    if w64.shape[0] % 2:
        w64 = np.concatenate([w64, np.zeros((1, w64.shape[1]), dtype=w64.dtype)])
    return w64.reshape(w64.shape[0] // 2, 2, w64.shape[1])


def saturation_excess(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """`sum_i (sat16(p_i) - p_i)` of the raw pair products: [..., M, K] x [K, N] -> [..., M, N]."""
    a64 = np.asarray(a, dtype=np.int64)
    wp = _padded_pairs(w)
    if a64.shape[-1] % 2:
        a64 = np.concatenate([a64, np.zeros(a64.shape[:-1] + (1,), dtype=np.int64)], axis=-1)
    if a64.shape[-1] != 2 * wp.shape[0]:
        raise KernelError(f"input K {a.shape[-1]} does not match weights K {np.shape(w)[0]}")
    ap = a64.reshape(a64.shape[:-1] + (wp.shape[0], 2))  # [..., M, P, 2]
    out = np.zeros(a64.shape[:-1] + (wp.shape[2],), dtype=np.int64)
    for s in range(0, wp.shape[0], _CHUNK_PAIRS):
        # [..., M, P', 1] * [P', N] per half of the pair -> [..., M, P', N]
        p = ap[..., s : s + _CHUNK_PAIRS, 0:1] * wp[s : s + _CHUNK_PAIRS, 0]
        p = p + ap[..., s : s + _CHUNK_PAIRS, 1:2] * wp[s : s + _CHUNK_PAIRS, 1]
        out += (np.clip(p, INT16_MIN, INT16_MAX) - p).sum(axis=-2)
    return out


def pair_saturating_acc(
    a: np.ndarray, w: np.ndarray, a_zp: Any = 0, w_zp: Any = 0, bias: Any = None
) -> np.ndarray:
    """MLAS's u8s8 accumulator without VNNI (int64 result), same arguments as `matmul_acc`.

    `a` holds raw uint8 values [..., M, K], `w` raw int8 weights [K, N]; zero points and
    bias are applied exactly after the saturating raw sum, as MLAS does.
    """
    a64 = np.asarray(a, dtype=np.int64)
    w64 = np.asarray(w, dtype=np.int64)
    if a64.size and (a64.min() < 0 or a64.max() > U8_MAX):
        raise KernelError("pair-saturating accumulation needs uint8 activations")
    if w64.size and (w64.min() < -128 or w64.max() > 127):
        raise KernelError("pair-saturating accumulation needs int8 weights")
    return matmul_acc(a64, w64, a_zp, w_zp, bias) + saturation_excess(a64, w64)


def pair_bounds(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact [lo, hi] of every raw pair sum over uint8 inputs: two [pairs, N] arrays."""
    w = np.asarray(w)
    # weights of at most 16 bits: 255 times a pair's sum fits int32 (a large conv's weights
    # are millions of entries: a quarter of int64's memory traffic)
    dt = np.int32 if w.dtype.kind in "iu" and w.dtype.itemsize <= 2 else np.int64
    wp = _padded_pairs(w, dt)
    hi = U8_MAX * np.maximum(wp, 0).sum(axis=1, dtype=dt)
    lo = U8_MAX * np.minimum(wp, 0).sum(axis=1, dtype=dt)
    return lo, hi


def reachable_columns(w: np.ndarray) -> np.ndarray:
    """Per column: can some uint8 input row saturate some pair (bool [N])."""
    lo, hi = pair_bounds(w)
    return np.asarray(((hi > INT16_MAX) | (lo < INT16_MIN)).any(axis=0))


@dataclass(frozen=True)
class SaturatingPairs:
    """The pairs of one weight column that can saturate, by direction (pair indices i)."""

    above: tuple[int, ...]  # 255 * (positive weights) > int16 max
    below: tuple[int, ...]  # 255 * (negative weights) < int16 min

    def __bool__(self) -> bool:
        return bool(self.above or self.below)


def saturating_pairs(w_col: Sequence[int] | np.ndarray) -> SaturatingPairs:
    """Which pairs (k = 2i, 2i+1) of one raw int8 weight column can saturate."""
    lo, hi = pair_bounds(np.asarray(w_col, dtype=np.int64).reshape(-1, 1))
    return SaturatingPairs(
        tuple(int(i) for i in np.nonzero(hi[:, 0] > INT16_MAX)[0]),
        tuple(int(i) for i in np.nonzero(lo[:, 0] < INT16_MIN)[0]),
    )


def _drive(w: np.ndarray, pairs: Sequence[int], sign: int, row: np.ndarray) -> None:
    """Set the entries of `pairs` to their saturating extreme in direction `sign`."""
    for i in pairs:
        for k in (2 * i, 2 * i + 1):
            if k < len(w):
                row[k] = U8_MAX if w[k] * sign > 0 else 0


def saturating_row(w_col: Sequence[int] | np.ndarray) -> tuple[int, ...] | None:
    """A uint8 row on which the exact and pair-saturating accumulators differ, or None.

    Every pair saturable in the direction with more such pairs is driven to its
    extreme; all other entries are 0 (their pair sums are 0). The excesses then
    share one sign and are non-zero, so the accumulators differ whatever the zero points.
    """
    w = np.asarray(w_col, dtype=np.int64)
    sp = saturating_pairs(w)
    if not sp:
        return None
    pairs, sign = (sp.above, 1) if len(sp.above) >= len(sp.below) else (sp.below, -1)
    row = np.zeros(len(w), dtype=np.int64)
    _drive(w, pairs, sign, row)
    return tuple(int(v) for v in row)


def column_accs(
    row: Sequence[int] | np.ndarray,
    w_col: Sequence[int] | np.ndarray,
    a_zp: int,
    w_zp: int,
    bias: int,
) -> tuple[int, int]:
    """(exact, pair-saturating) accumulator of one row against one weight column."""
    a = np.asarray(row, dtype=np.int64).reshape(1, -1)
    w = np.asarray(w_col, dtype=np.int64).reshape(-1, 1)
    b = np.array([bias], dtype=np.int64)
    exact = int(matmul_acc(a, w, a_zp, w_zp, b)[0, 0])
    return exact, exact + int(saturation_excess(a, w)[0, 0])


def _prefixes(n: int) -> list[int]:
    out, k = [], 1
    while k < n:
        out.append(k)
        k *= 2
    return [*out, n]


def divergent_row(
    w_col: Sequence[int] | np.ndarray,
    w_zp: int,
    a_zp: int,
    bias: int,
    differs: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> tuple[int, ...] | None:
    """A uint8 row whose (exact, saturating) accumulators satisfy `differs`, or None.

    `differs(exact, saturating)` is vectorised over int64 arrays (e.g. "the epilogue's
    outputs differ beyond the policy"). Shapes tried: the first n saturable pairs of one
    direction driven to their extreme (n = 1, 2, 4, ..., all), the remaining entries
    lifted to each exact accumulator `differs` accepts; every row returned is re-checked
    on the whole row, so other pairs saturating as well cannot make it wrong.
    """
    w = np.asarray(w_col, dtype=np.int64)
    sp = saturating_pairs(w)
    for pairs, sign in ((sp.above, 1), (sp.below, -1)):
        for n in _prefixes(len(pairs)) if pairs else []:
            row = _try_shape(w, pairs[:n], sign, int(w_zp), int(a_zp), int(bias), differs)
            if row is not None:
                return row
    return None


def _try_shape(w, pairs, sign, w_zp, a_zp, bias, differs) -> tuple[int, ...] | None:
    row = np.full(len(w), a_zp, dtype=np.int64)
    fixed = np.zeros(len(w), dtype=bool)
    for i in pairs:
        fixed[2 * i : 2 * i + 2] = True
    _drive(w, pairs, sign, row)
    fixed_part = int(((row[fixed] - a_zp) * (w[fixed] - w_zp)).sum()) + bias
    ap = row[fixed].reshape(1, -1)
    excess = int(saturation_excess(ap, w[fixed].reshape(-1, 1))[0, 0])
    free = np.nonzero(~fixed)[0]
    c = w[free] - w_zp
    t1, t2 = c * (0 - a_zp), c * (U8_MAX - a_zp)
    lo = fixed_part + int(np.minimum(t1, t2).sum())
    hi = fixed_part + int(np.maximum(t1, t2).sum())
    span = hi - lo + 1
    cand = (
        np.arange(lo, hi + 1, dtype=np.int64)
        if span <= _MAX_CANDIDATES
        else unique(np.linspace(lo, hi, _MAX_CANDIDATES).round().astype(np.int64))
    )
    hits = cand[np.asarray(differs(cand, cand + excess), dtype=bool)]
    if hits.size == 0:
        return None
    # a few hits spread over the band (an integer in range may still be unreachable)
    picks = hits[unique(np.linspace(0, hits.size - 1, min(hits.size, 9)).astype(int))]
    for target in picks.tolist():
        full = row.copy()
        if free.size:
            spec = LiftSpec("acc", tuple(int(v) for v in w[free]), w_zp, a_zp, "uint8", 0)
            try:
                full[free] = lift_row(spec, int(target) - fixed_part, timeout_s=2.0)
            except LiftError:
                continue
        exact, sat = column_accs(full, w, a_zp, w_zp, bias)
        if bool(np.asarray(differs(np.array([exact]), np.array([sat])))[0]):
            return tuple(int(v) for v in full)
    return None
