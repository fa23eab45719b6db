"""Freezing term parameters: a table of ints is taken as it is (fast path), anything else
converted entry by entry; a LutParams' lut term is the op() form, its parameters built once."""

from __future__ import annotations

import pickle

import numpy as np

from npu_backend.postprocess import LutParams
from prover.terms import Op, Table, Var, _freeze, canonical_text, op, term_hash

TABLE = tuple(range(-128, 128))


def test_a_table_of_ints_freezes_once_to_a_table_equal_to_the_tuple():
    """A long tuple of ints freezes to a `Table` (its hash kept): equal to the tuple, hashed
    as it, written as it in canonical text, pickled as a plain tuple; a Table freezes to
    itself, and so does a short int tuple (no copy)."""
    got = _freeze(TABLE)
    assert type(got) is Table and got == TABLE and hash(got) == hash(TABLE)
    assert _freeze(got) is got
    short = (1, 2, 3)
    assert _freeze(short) is short
    for form in (list(TABLE), np.array(TABLE, dtype=np.int64), np.array(TABLE, dtype=np.int16)):
        got = _freeze(form)
        assert got == TABLE and type(got) is Table
        assert all(type(v) is int for v in got)
    t = op("lut", Var("x"), table=TABLE, in_type="int8", index_order="offset")
    plain = Op(
        "lut", (Var("x"),), (("in_type", "int8"), ("index_order", "offset"), ("table", TABLE))
    )
    assert t == plain and hash(t) == hash(plain) and canonical_text(t) == canonical_text(plain)
    back = pickle.loads(pickle.dumps(t))
    assert back == t and type(back.kwargs["table"]) is tuple


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
