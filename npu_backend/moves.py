"""The NPU's data movement: a strided gather, its concrete execution and its index term.

`out` element with coordinates c (row-major in `shape`) reads the source's flat element
`offset + sum_i c_i * strides[i]`. `gather_strides` gives the strides of a Reshape (the
source's row-major order, offset 0) and of a Transpose (the source's strides permuted).
"""

from __future__ import annotations

import numpy as np

from prover.terms import Const, Term, Var, op


def row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major element strides of `shape`."""
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= int(d)
    return tuple(out[::-1])


def transpose_strides(src: tuple[int, ...], perm: tuple[int, ...]) -> tuple[int, ...]:
    """Gather strides of `transpose(perm)` of a row-major `src`: output axis i walks input
    axis perm[i]."""
    st = row_major(src)
    return tuple(st[p] for p in perm)


def gather(
    x: np.ndarray, shape: tuple[int, ...], strides: tuple[int, ...], offset: int
) -> np.ndarray:
    """The strided gather of flat `x` into `shape` (a ValueError for a read outside `x`)."""
    flat = np.asarray(x).reshape(-1)
    idx = np.full(tuple(shape), int(offset), dtype=np.int64)
    for i, (d, s) in enumerate(zip(shape, strides, strict=True)):
        ax = [1] * len(shape)
        ax[i] = int(d)
        idx = idx + (np.arange(int(d), dtype=np.int64) * int(s)).reshape(ax)
    if idx.size and (idx.min() < 0 or idx.max() >= flat.size):
        raise ValueError(f"gather reads outside the {flat.size} source elements")
    return flat[idx]


def gather_index_term(
    shape: tuple[int, ...], strides: tuple[int, ...], offset: int, f: Term | None = None
) -> Term:
    """The source flat index of output flat element `f` (default `Var("f")`) as a term."""
    f = Var("f") if f is None else f
    acc: Term = Const(int(offset))
    for s_out, d, s in zip(row_major(shape), shape, strides, strict=True):
        c = op("mod_const", op("floordiv_const", f, c=s_out), c=int(d))
        acc = op("add", acc, op("mul_const", c, c=int(s)))
    return acc
