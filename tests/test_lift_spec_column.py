"""`compiler.proving.cex.lift_spec`: the one reading of a matmul column's accumulator
parameters, used to lift refutations (cex, prove) and to find u8s8 divergence rows
(divergence). Checked against the IR's concrete matmul (`semantics.matmul_acc_of`) for
every form a per-column weight zero point takes (scalar, tuple, list, numpy array); the
lifting copy once crashed on a list that the divergence copy accepted."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.ir.graph import Node
from compiler.ir.semantics import matmul_acc_of
from compiler.proving.cex import lift_spec
from compiler.proving.divergence import _col_params
from prover.lift import lift_row, row_value
from prover.pair_saturation import column_accs

FORMS = {
    "scalar": lambda zp: zp[0],
    "numpy_scalar": lambda zp: np.int8(zp[0]),
    "tuple": tuple,
    "list": list,
    "array": np.array,
}


def _node(rng: np.random.Generator, form: str, with_bias: bool) -> Node:
    K, N = int(rng.integers(1, 24)), int(rng.integers(2, 7))
    zp = [int(v) for v in rng.integers(-128, 128, N)]
    bias = tuple(int(v) for v in rng.integers(-5000, 5000, N)) if with_bias else None
    attrs = dict(
        w=rng.integers(-128, 128, (K, N)).astype(np.int8),
        w_zp=FORMS[form](zp),
        a_zp=int(rng.integers(0, 256)),
        a_type="uint8",
        bias=bias,
    )
    return Node("mm", "matmul", ["x"], ["y"], attrs)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("with_bias", [False, True])
def test_column_spec_reproduces_the_matmul(form, with_bias, rng):
    """Every column's spec gives the node's own accumulator on random rows, and the
    divergence search reads the same parameters."""
    for _ in range(10):
        n = _node(rng, form, with_bias)
        K, N = n.attrs["w"].shape
        rows = rng.integers(0, 256, (4, K))
        acc = matmul_acc_of(n, rows)
        for j in range(N):
            spec = lift_spec(n, j)
            w, w_zp, a_zp, bias = _col_params(n, j)
            assert (tuple(w.tolist()), w_zp, a_zp, bias) == (
                spec.weights,
                spec.w_zp,
                spec.x_zp,
                spec.bias,
            )
            for i, row in enumerate(rows):
                assert row_value(spec, row) == acc[i, j], (form, j)
                assert column_accs(row, w, a_zp, w_zp, bias)[0] == acc[i, j]


def test_lifted_row_reaches_the_accumulator_in_its_column(rng):
    """A lifted row gives the asked accumulator in the node's own evaluation; the spec of
    a neighbouring column would not (the column index matters)."""
    n = _node(rng, "list", True)
    K, N = n.attrs["w"].shape
    target = int(matmul_acc_of(n, rng.integers(0, 256, (1, K)))[0, 1])
    row = np.asarray(lift_row(lift_spec(n, 1), target)).reshape(1, -1)
    acc = matmul_acc_of(n, row)
    assert acc[0, 1] == target
    others = [row_value(lift_spec(n, j), row[0]) for j in range(N) if j != 1]
    assert others == [int(acc[0, j]) for j in range(N) if j != 1]
