"""`prover.inttypes` helpers."""

import numpy as np


def test_int_tuple_is_the_values_as_python_ints():
    from prover.inttypes import int_tuple

    for dtype in (np.int8, np.uint8, np.int32, np.int64, np.uint16, np.bool_):
        a = np.arange(-3, 5).astype(dtype)
        got = int_tuple(a)
        assert got == tuple(int(v) for v in a) and all(type(v) is int for v in got)
    assert int_tuple(np.array([1.7, -2.5])) == (1, -2)  # floats: int() of each, as before
    assert int_tuple([3, 4]) == (3, 4) and int_tuple(np.zeros(0, np.int8)) == ()
