"""The IR keeps constant weights narrow (`narrow_weights`): int16 for 8-bit weights, never
wider than needed, read-only; the kernels compute with them exactly as with int64."""

from __future__ import annotations

import numpy as np
import pytest
from models import matmul_activation

from compiler.frontend.ops.integer_matmul import narrow_weights
from compiler.frontend.reader import to_ir
from prover.inttypes import int_type
from prover.matmul import accumulator_range, matmul_acc


@pytest.mark.parametrize(
    "lo, hi, dtype",
    [(-128, 127, np.int16), (0, 255, np.int16), (-32768, 32767, np.int16),
     (0, 65535, np.int32), (-(2**31), 2**31 - 1, np.int32), (0, 2**31, np.int64)],
)  # fmt: skip
def test_the_narrowest_type_holding_the_values(lo, hi, dtype):
    w = narrow_weights(np.array([[lo, hi], [0, 1]], dtype=np.int64))
    assert w.dtype == dtype and w.min() == lo and w.max() == hi
    with pytest.raises(ValueError):
        w[0, 0] = 1  # read-only: no pass may change a weight in place


def test_float_weights_are_refused():
    with pytest.raises(TypeError):
        narrow_weights(np.zeros((2, 2), np.float32))


def test_kernels_on_narrow_weights_are_exact_at_the_extremes():
    """The largest products and sums int16 weights allow (where int16 arithmetic would
    wrap) give the int64 results."""
    w64 = np.array([[127, -128], [127, -128], [-128, 127]], dtype=np.int64)
    w = narrow_weights(w64)
    a = np.array([[255, 255, 0], [0, 0, 255]], dtype=np.int64)
    np.testing.assert_array_equal(matmul_acc(a, w, 0, -128), matmul_acc(a, w64, 0, -128))
    u8 = int_type("uint8")
    assert accumulator_range(w, -128, u8, 0) == accumulator_range(w64, -128, u8, 0)


def test_the_ir_of_a_model_holds_its_weights_as_int16():
    g, _ = to_ir(matmul_activation())
    (mm,) = [n for n in g.nodes if n.op == "matmul"]
    assert mm.attrs["w"].dtype == np.int16 and not mm.attrs["w"].flags.writeable
