"""Freezing term parameters: a table of ints is taken as it is (fast path), anything else
converted entry by entry; a LutParams' lut term is the op() form, its parameters built once."""

from __future__ import annotations

import numpy as np

from npu_backend.postprocess import LutParams
from prover.terms import Var, _freeze, op, term_hash

TABLE = tuple(range(-128, 128))


def test_a_tuple_of_ints_is_kept_and_other_forms_freeze_to_it():
    assert _freeze(TABLE) is TABLE
    for form in (list(TABLE), np.array(TABLE, dtype=np.int64), np.array(TABLE, dtype=np.int16)):
        got = _freeze(form)
        assert got == TABLE and type(got) is tuple
        assert all(type(v) is int for v in got)


def test_entries_that_are_not_python_ints_are_converted():
    got = _freeze((1, np.int8(2), np.float32(0.5), [3, np.uint8(4)]))
    assert got == (1, 2, 0.5, (3, 4))
    assert [type(v) for v in got[:3]] == [int, int, float] and type(got[3]) is tuple
    assert _freeze((True, 1)) == (True, 1) and type(_freeze((True, 1))[0]) is bool


def test_lut_term_is_the_op_form_with_its_params_built_once():
    lp = LutParams(TABLE, "int8", "int8")
    x, y = Var("acc"), Var("other")
    want = op("lut", x, table=list(TABLE), in_type="int8", index_order="offset")
    assert lp.term(x) == want and term_hash(lp.term(x)) == term_hash(want)
    assert lp.term(x).params is lp.term(y).params  # frozen once, shared by every call
    assert lp.term(y).args == (y,)
    other = LutParams(TABLE[::-1], "int8", "int8")
    assert other.term(x) != lp.term(x)
    assert LutParams(TABLE, "int8", "int8", "twos_complement").term(x) != lp.term(x)
