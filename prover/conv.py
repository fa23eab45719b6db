"""Integer convolution as windowed matmul accumulation (the ONNX QLinearConv/ConvInteger meaning).

A conv output element (n, o..., c) of group g = c // (C_out / group) is one matmul row: the
patch of input channels of group g at kernel offsets `o * stride + k * dilation - pad_begin`
(channel-major, then kernel rows, then kernel columns: ONNX's weight order [C_out, C_in/group,
k...]) times column c of the weights [K_g, C_out]. A patch position outside the input (padding)
reads the input zero point, so it contributes 0 to the sum, exactly as ONNX specifies and ONNX
Runtime computes. The accumulator is `prover.matmul.matmul_acc` of that row, exact in int64;
its per-column range is `accumulator_range` of the weights alone (a padded term is 0, inside
every term's interval), so the matmul epilogue machinery applies per output channel unchanged.

Layout: the input here is channels-last [N, *spatial, C] and the output [N, *out_spatial, C_out].
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np

from .domain import KernelError
from .matmul import matmul_acc
from .pair_saturation import INT16_MAX, INT16_MIN


@dataclass(frozen=True)
class Window:
    """A convolution's window: per spatial axis kernel, stride, dilation, and pads
    (`pads` = begins then ends, ONNX's order); `group` splits the `channels` input channels."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    group: int = 1
    channels: int = 0  # input channels (0: not given)

    def __post_init__(self) -> None:
        r = len(self.kernel)
        if not (len(self.strides) == len(self.dilations) == r and len(self.pads) == 2 * r):
            raise KernelError(f"window {self} has inconsistent ranks")
        if min(self.kernel + self.strides + self.dilations + (self.group,)) < 1:
            raise KernelError(f"window {self}: kernel, strides, dilations, group must be >= 1")
        if min(self.pads, default=0) < 0:
            raise KernelError(f"window {self}: negative pads")

    @property
    def rank(self) -> int:
        return len(self.kernel)

    @property
    def group_kind(self) -> str:
        """ "one" (group 1), "depthwise" (one input channel per group) or "grouped"."""
        if self.group == 1:
            return "one"
        return "depthwise" if self.channels == self.group else "grouped"

    def out_spatial(self, spatial: tuple[int, ...]) -> tuple[int, ...]:
        """Output spatial size for input spatial size `spatial` (ONNX's formula)."""
        r = self.rank
        out = []
        for i, size in enumerate(spatial):
            span = (self.kernel[i] - 1) * self.dilations[i] + 1
            padded = size + self.pads[i] + self.pads[r + i]
            if padded < span:
                raise KernelError(f"window {self} does not fit input {spatial}")
            out.append((padded - span) // self.strides[i] + 1)
        return tuple(out)

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": list(self.kernel),
            "strides": list(self.strides),
            "dilations": list(self.dilations),
            "pads": list(self.pads),
            "group": self.group,
            "channels": self.channels,
        }


def window_from_json(j: dict[str, Any]) -> Window:
    """The `Window` of its `to_json` form (KernelError on a malformed one)."""
    try:
        return Window(
            tuple(int(v) for v in j["kernel"]),
            tuple(int(v) for v in j["strides"]),
            tuple(int(v) for v in j["dilations"]),
            tuple(int(v) for v in j["pads"]),
            int(j["group"]),
            int(j.get("channels", 0)),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise KernelError(f"malformed conv window {j!r}: {e}") from None


def patches(x: np.ndarray, win: Window, x_zp: int) -> np.ndarray:
    """The im2col view of channels-last `x` [N, *spatial, C]: [N, *out_spatial, group, K_g],
    K_g = (C / group) * prod(kernel) ordered (channel, kernel offsets); padding reads `x_zp`."""
    x = np.asarray(x, dtype=np.int64)
    r = win.rank
    if x.ndim != r + 2 or x.shape[-1] % win.group or win.channels not in (0, x.shape[-1]):
        raise KernelError(f"input {x.shape} does not fit window {win}")
    spatial = x.shape[1:-1]
    out_sp = win.out_spatial(spatial)
    pad = [(0, 0)] + [(win.pads[i], win.pads[r + i]) for i in range(r)] + [(0, 0)]
    xp = np.pad(x, pad, constant_values=int(x_zp))
    taps = []
    for offs in product(*(range(k) for k in win.kernel)):
        sl = tuple(
            slice(
                offs[i] * win.dilations[i],
                offs[i] * win.dilations[i] + (out_sp[i] - 1) * win.strides[i] + 1,
                win.strides[i],
            )
            for i in range(r)
        )
        taps.append(xp[(slice(None), *sl, slice(None))])
    t = np.stack(taps, axis=-1)  # [N, *out, C, taps]
    c = x.shape[-1]
    t = t.reshape(t.shape[: r + 1] + (win.group, c // win.group, len(taps)))
    return t.reshape(t.shape[: r + 2] + (-1,))


def conv_acc(
    x: np.ndarray,
    w: np.ndarray,
    win: Window,
    x_zp: Any,
    w_zp: Any,
    bias: Any = None,
    cols: tuple[int, int] | None = None,
    matmul: Callable[..., np.ndarray] = matmul_acc,
) -> np.ndarray:
    """Exact accumulator [N, *out_spatial, C] of channels-last `x` and weights `w` [K_g,
    C_out] (column c in group c // (C_out / group)), for output columns `cols` = [n0, n1)
    (default all: C = C_out); `w_zp` (scalar or one per computed column) and `bias` (one per
    computed column, or None) are those of the computed columns. `matmul` computes each
    group's `matmul_acc` (the simulator passes its BLAS form where that is provably exact,
    `npu_backend.exact_matmul`)."""
    w64 = np.asarray(w, dtype=np.int64)
    p = patches(x, win, int(x_zp))
    k_g, n = w64.shape
    if p.shape[-1] != k_g or n % win.group:
        raise KernelError(f"patches {p.shape} do not match weights {w64.shape} in {win}")
    n0, n1 = cols or (0, n)
    if not 0 <= n0 < n1 <= n:
        raise KernelError(f"columns {cols} outside the {n} columns")
    per = n // win.group
    wz = np.broadcast_to(np.asarray(w_zp, dtype=np.int64), (n1 - n0,))
    b = None if bias is None else np.asarray(bias, dtype=np.int64).reshape(n1 - n0)
    if n0 % per == 0 and n1 % per == 0:  # whole groups: one batched matmul over them
        return _whole_groups(p, w64[:, n0:n1], x_zp, wz, b, n0 // per, n1 // per, matmul)
    outs = []
    for g in range(n0 // per, (n1 - 1) // per + 1):
        c0, c1 = max(n0, g * per), min(n1, (g + 1) * per)
        loc = slice(c0 - n0, c1 - n0)
        outs.append(
            matmul(p[..., g, :], w64[:, c0:c1], x_zp, wz[loc], None if b is None else b[loc])
        )
    return np.concatenate(outs, axis=-1)


def _whole_groups(
    p: np.ndarray,
    w: np.ndarray,
    x_zp: Any,
    w_zp: np.ndarray,
    bias: np.ndarray | None,
    g0: int,
    g1: int,
    matmul: Callable[..., np.ndarray],
) -> np.ndarray:
    """`conv_acc` of groups [g0, g1) (all their columns `w`) as one batched `matmul` with
    the group as the batch axis: a depthwise conv is one call, not one per channel."""
    lead = p.shape[:-2]
    k, cols = w.shape
    g = g1 - g0
    per = cols // g
    a = np.moveaxis(p[..., g0:g1, :], -2, 0).reshape(g, -1, k)  # [g, rows, K_g]
    wb = w.reshape(k, g, per).transpose(1, 0, 2)  # [g, K_g, per]
    acc = matmul(a, wb, x_zp, w_zp.reshape(g, 1, per))  # [g, rows, per]
    acc = acc.transpose(1, 0, 2).reshape(lead + (cols,))
    return acc if bias is None else acc + bias


def row_tile(win: Window, x: np.ndarray, r0: int, r1: int, x_zp: int) -> tuple[np.ndarray, Window]:
    """The input rows (first spatial axis) output rows [r0, r1) read, halo included, with the
    rows outside the input filled with `x_zp`, and the window computing exactly those output
    rows from them (no padding along that axis): `conv_acc` of the pair is rows [r0, r1) of
    the whole conv's."""
    r = win.rank
    s, d, k, pad = win.strides[0], win.dilations[0], win.kernel[0], win.pads[0]
    lo, hi = r0 * s - pad, (r1 - 1) * s - pad + (k - 1) * d + 1
    size = x.shape[1]
    slab = np.full((x.shape[0], hi - lo, *x.shape[2:]), int(x_zp), dtype=np.int64)
    a, b = max(0, lo), min(size, hi)
    if a < b:
        slab[:, a - lo : b - lo] = x[:, a:b]
    pads = (0, *win.pads[1:r], 0, *win.pads[r + 1 :])
    return slab, Window(win.kernel, win.strides, win.dilations, pads, win.group, win.channels)


def halo_rows(win: Window, tm: int) -> int:
    """Input rows (first spatial axis) a tile of `tm` output rows reads."""
    return (tm - 1) * win.strides[0] + (win.kernel[0] - 1) * win.dilations[0] + 1


def any_pair_saturable(w: np.ndarray) -> np.ndarray:
    """Per column of uint8 x int8 weights [K, N]: can *some* pair of two products, in any
    order, saturate int16 (the two largest positive, or two most negative, weights times
    255)? False means exact accumulation whatever pair order a kernel uses."""
    w = np.asarray(w)
    k = w.shape[0]
    if k < 2:
        return np.zeros(w.shape[1], dtype=bool)
    # the two greatest and two least of each column, by reductions (a partition along K
    # cost several times more on a large conv's weights)
    top, second = _two_extremes(w, greatest=True)
    least, next_least = _two_extremes(w, greatest=False)
    hi = 255 * (np.maximum(top, 0) + np.maximum(second, 0))
    lo = 255 * (np.minimum(least, 0) + np.minimum(next_least, 0))
    return np.asarray((hi > INT16_MAX) | (lo < INT16_MIN))


def _two_extremes(w: np.ndarray, greatest: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per column of integer `w` [K >= 2, N]: the greatest (least) entry and the next one
    (equal to the first where it occurs twice), as int64."""
    info = np.iinfo(w.dtype)
    if greatest:
        top = w.max(axis=0)
        rest = np.where(w < top, w, info.min).max(axis=0)  # the greatest under `top`
    else:
        top = w.min(axis=0)
        rest = np.where(w > top, w, info.max).min(axis=0)
    twice = np.count_nonzero(w == top, axis=0) > 1
    return top.astype(np.int64), np.where(twice, top, rest).astype(np.int64)
