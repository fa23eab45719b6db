"""Per-object memos of terms: an `Op`'s hash, free variables and canonical text are kept on
the object and never pickled or copied; the canonical texts built from those pieces are
byte for byte `json.dumps(..., sort_keys=True, separators=(",", ":"))` of the JSON form,
so obligation hashes (the proof store's keys) do not move."""

from __future__ import annotations

import copy
import hashlib
import json
import pickle

import numpy as np
import pytest
from models import conv_activation, matmul_activation, two_sites

import compiler.proving.prove as prove
from compiler.api import compile_model
from npu_backend.target import load_target
from prover.obligation import LiftSpec, Obligation, _lift_text
from prover.policy import Policy
from prover.terms import (
    Const,
    Op,
    Var,
    canonical_text,
    free_vars,
    int_seq_text,
    op,
    term_hash,
    to_json,
)

TABLE = tuple(range(-128, 128))


class Name(str):
    pass


def slow(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def hand_terms() -> list:
    x, y = Var("acc"), Var('ünï"code\\')
    rq = op("requant_float", x, scale=0.1 + 0.2, zp=-3, out="int8")
    shared = op("add", rq, Const(-7))
    return [
        x,
        Const(-(2**40)),
        rq,
        op("lut", rq, table=TABLE, in_type="int8", index_order="offset"),
        op("lut", shared, table=list(TABLE[::-1]), in_type="int8", index_order=None),
        op("add", shared, shared),  # a subterm shared twice
        op("sub", x, y),
        # params of every JSON kind, nested tuples, keys out of order, a short int tuple
        Op(
            "clip",
            (x,),
            (
                ("z", (1, (2.5, -3), ("a", None), True)),
                ("b", False),
                ("a", float("inf")),
                ("n", -0.0),
                ("s", "q\n\u00e9"),
                ("t", (1, 2, 3)),
                ("f", 1e-300),
                ("g", np.float64(0.1)),  # a float subclass: the encoder's own path
                ("h", float("nan")),
                ("i", float("-inf")),
                ("j", Name("x")),  # a str subclass
                ("l", 2**70),
                ("m", (True,) * 40),  # long, not plain ints: never memoized as ints
            ),
        ),
        Op("clip", (x,), (("k", 1), ("k", 2))),  # duplicate keys: what a dict makes of them
        Op("lut", (x,), (("table", TABLE),)),  # the same table object as above
    ]


def test_term_canonical_text_is_json_dumps_of_its_json_form():
    for t in hand_terms():
        want = slow(to_json(t))
        assert canonical_text(t) == want
        assert canonical_text(t) == want  # memoized: the same text again
        assert term_hash(t) == hashlib.sha256(want.encode()).hexdigest()


def test_memos_are_not_pickled_or_copied_and_hash_is_the_fields_hash():
    t = hand_terms()[2]
    h = hash(t)
    assert h == hash((t.prim, t.args, t.params))
    canonical_text(t), free_vars(t)
    assert all(m is not None for m in vars(t)["_memo"])
    for u in (pickle.loads(pickle.dumps(t)), copy.copy(t), copy.deepcopy(t)):
        assert set(vars(u)) == {"prim", "args", "params"}
        assert u == t and hash(u) == h and canonical_text(u) == canonical_text(t)


def test_only_short_texts_are_kept_on_their_op():
    """A table's text is kept once per table object, not in every op over it."""
    short, long_ = hand_terms()[2], hand_terms()[3]
    for t in (short, long_):
        canonical_text(t)
    assert vars(short)["_memo"][2] is not None and vars(long_)["_memo"][2] is None
    assert canonical_text(long_) == slow(to_json(long_))


def test_free_vars_is_a_fresh_set_each_call():
    t = op("sub", op("add", Var("a"), Const(1)), Var("b"))
    s = free_vars(t)
    assert s == {"a", "b"}
    s.add("c")
    assert free_vars(t) == {"a", "b"} and free_vars(t.args[0]) == {"a"}
    assert free_vars(Const(3)) == set() and free_vars(Var("q")) == {"q"}


def test_a_table_is_encoded_from_its_own_entries():
    """The int-tuple memo is by identity: an equal-length table with other entries, or a
    new object with the same entries, gets its own text."""
    a = op("lut", Var("x"), table=TABLE, in_type="int8", index_order="offset")
    b = op("lut", Var("x"), table=tuple(v + 1 for v in TABLE), in_type="int8")
    c = op("lut", Var("x"), table=tuple(list(TABLE)), in_type="int8", index_order="offset")
    for t in (a, b, c):
        assert canonical_text(t) == slow(to_json(t))
    assert canonical_text(a) == canonical_text(c) != canonical_text(b)


def obligation_checks(obs) -> int:
    n = 0
    for ob in obs:
        want = slow(ob.to_json())
        assert ob.canonical == want
        assert ob.hash == hashlib.sha256(want.encode()).hexdigest()
        n += 1
    return n


def test_hand_made_obligations_canonical_text():
    terms = [t for t in hand_terms() if free_vars(t) <= {"acc"}]
    rng = {"acc": (-(2**31), 2**31 - 1)}
    lift = LiftSpec("acc", (1, -2, 3), w_zp=-1, x_zp=3, x_type="uint8", bias=-5)
    obs = [
        Obligation(kind, b, a, rng, pol, lf)
        for kind in ("epilogue", "other")
        for b, a in zip(terms, terms[1:] + terms[:1], strict=True)
        for pol in (Policy(0), Policy.parse("bitwise"))
        for lf in (None, lift)
    ]
    obs.append(Obligation("index_map", (Var("f"), Var("f")), (Var("f"), Const(0)), {"f": (0, 9)}))
    assert obligation_checks(obs) == len(obs)


FLOAT = load_target("npu_backend/targets/npu_float.toml")


@pytest.mark.parametrize(
    "model",
    [
        two_sites(),
        matmul_activation(N=24, per_channel=True, w_scale=list(np.linspace(0.003, 0.02, 24))),
        conv_activation(C_out=16, per_channel=True, bias=True, kernel=3),
    ],
)
def test_real_sites_obligations_canonical_text(model, monkeypatch):
    seen: list[Obligation] = []
    real = prove._build

    def build(g, s, c):
        out = real(g, s, c)
        seen.extend(ob for ob, *_ in out)
        return out

    monkeypatch.setattr(prove, "_build", build)
    compile_model(model, "bitwise", FLOAT)
    assert obligation_checks(seen) == len(seen) > 0


def test_group_post_term_is_kept_for_its_post_and_accumulator():
    """`ColumnGroup.post_term`: built once for the obligation and the fused node, again for
    a replaced `post` or another accumulator term."""
    import dataclasses

    from compiler.ir.column_group import epilogue_term

    r = compile_model(two_sites(), "bitwise", FLOAT)
    grp = r.context.state.sites[0].post[0]
    acc = Var("acc")
    t = grp.post_term(acc)
    assert grp.post_term(Var("acc")) is t and t == grp.post.epilogue_term(acc)
    other = op("add_const", acc, c=3)
    assert grp.post_term(other) == grp.post.epilogue_term(other)
    rq = grp.post.requant
    grp.post = dataclasses.replace(grp.post, requant=dataclasses.replace(rq, zp=rq.zp + 1))
    assert grp.post_term(acc) == grp.post.epilogue_term(acc) != t
    assert epilogue_term(grp.post, acc) is grp.post_term(acc)


def test_lift_weights_are_python_ints_whatever_their_form():
    w = np.array([[1, -128], [3, 127]], dtype=np.int8)
    for form, want in (
        (w[:, 1], (-128, 127)),
        (np.array([0, 255], dtype=np.uint8), (0, 255)),
        (np.array([2**40], dtype=np.int64), (2**40,)),
        ([np.int32(5), 6], (5, 6)),
        ((True, 2), (1, 2)),
        (np.array([1.7, -2.5]), (1, -2)),
        ((1, 2), (1, 2)),
    ):
        got = LiftSpec("acc", form).weights
        assert got == want and type(got) is tuple and all(type(v) is int for v in got)
        assert LiftSpec("acc", form).to_json()["weights"] == list(want)


def test_int_seq_text_is_the_encoders_text():
    rng = np.random.default_rng(5)
    cases = [[], [0], [-12], [999], [-1024, 1023], [-1025], [1024], [2**70, -(2**70)]]
    for _ in range(200):
        hi = int(10 ** rng.uniform(0, 7))
        cases.append(rng.integers(-hi, hi, size=int(rng.integers(0, 300))).tolist())
    for v in cases:
        assert int_seq_text(v) == slow(v)
        assert int_seq_text(tuple(v)) == slow(v)
    t = op("lut", Var("x"), table=tuple(range(-128, 128)), in_type="int8", index_order="offset")
    assert canonical_text(t) == slow(to_json(t))


class _Spec(LiftSpec):
    def to_json(self):
        return {**super().to_json(), "extra": 1}


def test_lift_text_and_obligation_hash_are_the_encoders():
    rng = np.random.default_rng(6)
    acc = Var("acc")
    body = op("saturate", acc, type="int8")
    for i in range(100):
        k = int(rng.integers(1, 600))
        w = rng.integers(-128, 128, size=k) * (1 if i % 5 else 40)
        spec = LiftSpec(
            "acc" if i % 7 else 'ä"\\',
            w if i % 2 else tuple(bool(v % 2) for v in w) if i % 9 == 0 else tuple(w.tolist()),
            w_zp=np.int64(rng.integers(-3, 3)),
            x_zp=int(rng.integers(-3, 3)),
            x_type=("int8", "uint8", "int16")[i % 3],
            bias=True if i % 11 == 0 else int(rng.integers(-(2**40), 2**40)),
        )
        assert _lift_text(spec) == slow(spec.to_json())
        rng_ = {"acc": (-5, 5), spec.var: (0, 1)}
        ob = Obligation("epilogue", body, body, rng_, "bitwise", spec)
        assert ob.canonical == slow(ob.to_json())
    odd = _Spec("acc", (1, 2))
    assert _lift_text(odd) == slow(odd.to_json())
