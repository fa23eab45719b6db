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
    x: np.ndarray, w: np.ndarray, win: Window, x_zp: Any, w_zp: Any, bias: Any = None
) -> np.ndarray:
    """Exact accumulator [N, *out_spatial, C_out] of channels-last `x` and weights `w` [K_g,
    C_out] (column c in group c // (C_out / group)); `w_zp` scalar or per column."""
    w64 = np.asarray(w, dtype=np.int64)
    p = patches(x, win, int(x_zp))
    k_g, n = w64.shape
    if p.shape[-1] != k_g or n % win.group:
        raise KernelError(f"patches {p.shape} do not match weights {w64.shape} in {win}")
    per = n // win.group
    wz = np.broadcast_to(np.asarray(w_zp, dtype=np.int64), (n,))
    b = None if bias is None else np.asarray(bias, dtype=np.int64).reshape(n)
    outs = []
    for g in range(win.group):
        cols = slice(g * per, (g + 1) * per)
        outs.append(
            matmul_acc(p[..., g, :], w64[:, cols], x_zp, wz[cols], None if b is None else b[cols])
        )
    return np.concatenate(outs, axis=-1)


def any_pair_saturable(w: np.ndarray) -> np.ndarray:
    """Per column of uint8 x int8 weights [K, N]: can *some* pair of two products, in any
    order, saturate int16 (the two largest positive, or two most negative, weights times
    255)? False means exact accumulation whatever pair order a kernel uses."""
    w64 = np.asarray(w, dtype=np.int64)
    if w64.shape[0] < 2:
        return np.zeros(w64.shape[1], dtype=bool)
    s = np.sort(w64, axis=0)
    hi = 255 * (np.maximum(s[-1], 0) + np.maximum(s[-2], 0))
    lo = 255 * (np.minimum(s[0], 0) + np.minimum(s[1], 0))
    return np.asarray((hi > INT16_MAX) | (lo < INT16_MIN))
