"""Integer max pooling over a window (the ONNX MaxPool meaning on int8/uint8, as ONNX Runtime
computes it): each output element is the largest input element its window reads; padding
is never the maximum. A pad position reads the type's minimum, which equals ONNX's "max
over the positions inside the input" exactly when every window reads at least one input
position (`min_reads`; the frontend checks it before emitting the node).

Layout: channels-last, [N, *spatial, C] in, [N, *out_spatial, C] out (`prover.conv.patches`
with one group per channel).
"""

from __future__ import annotations

import numpy as np

from .conv import Window, patches
from .domain import KernelError


def max_pool(x: np.ndarray, win: Window, pad_value: int) -> np.ndarray:
    """Max over each output element's window of channels-last `x`, padding read as
    `pad_value` (int64 result)."""
    if win.group != x.shape[-1]:
        raise KernelError(f"a max pool window has one group per channel, got {win}")
    return patches(x, win, int(pad_value)).max(axis=-1)


def min_reads(spatial: tuple[int, ...], win: Window) -> int:
    """The fewest input positions any output window of an input of size `spatial` reads."""
    ones = np.ones((1, *spatial, 1), dtype=np.int64)
    one = Window(win.kernel, win.strides, win.dilations, win.pads, 1, 1)
    counts = patches(ones, one, 0).sum(axis=-1)
    return int(counts.min()) if counts.size else 0
