"""NPU-side preconditions are obligations (issue 10, finding 2), and values never wrap.

A precondition of the implementation (`after`) side that fails on a reachable input
refutes the rewrite, in every decision procedure alike, with that input, the reference
value and the violated precondition; only the reference (`before`) side's are assumed.
The simulator refuses undefined results; a scale the fixed-point quantiser cannot
represent keeps its op on the host; ranges and constants beyond 64 bits never wrap.
"""

from __future__ import annotations

import numpy as np
import pytest
from cli_helpers import prover
from models import matmul_activation
from test_backend_support import matmul_model

from compiler.api import compile_model
from compiler.ort.tables import session
from npu_backend import codegen, simulator
from npu_backend.lowered import HostOnnx, NpuMatMul
from npu_backend.postprocess import PostProcess, RequantParams
from npu_backend.simulator import UndefinedResult
from npu_backend.target import load_target
from prover import enumerate as enum
from prover import segments
from prover import smtdecide as smt
from prover.api import check
from prover.domain import NUMPY
from prover.errors import VacuousObligation
from prover.obligation import Obligation
from prover.requant import quantize_multiplier
from prover.smtlib import Encoding
from prover.solvers import Budget
from prover.terms import Const, PreconditionViolation, Var, evaluate, op

FIXED = load_target("npu_backend/targets/npu_fixed.toml")
ACC = Var("acc")
X = Var("x")
SMT = ("bitwuzla", "z3", "cvc5")
# cvc5 needs 3-10 s of CPU on the two obligations parametrised with BACKENDS (Bitwuzla
# and Z3 under 1 s): by default they are decided without it, with it under -m slow.
BACKENDS = [
    pytest.param(("bitwuzla", "z3"), id="bitwuzla-z3"),
    pytest.param(SMT, id="all-smt", marks=pytest.mark.slow),
]


def _all(ob: Obligation, backends: tuple[str, ...] = SMT):
    """The raw decision of every procedure (segments, enumerate, the SMT `backends`)."""
    out = {"segments": segments.decide(ob), "enumerate": enum.decide(ob)}
    for b in backends:
        out[b] = smt.decide(ob, b, Budget(timeout_s=30))
    return out


def _mbqm(shift: int = 13, m: int = 1 << 30) -> object:
    return op("requant_double", ACC, multiplier=m, shift=shift, zp=0, out="int8")


def _times_4096() -> object:
    return op("saturate", op("mul_const", ACC, c=4096), type="int8")


# --- the rule, in every procedure ----------------------------------------------------


@pytest.mark.parametrize("backends", BACKENDS)
def test_overflowing_npu_requantizer_is_refuted_by_every_procedure(backends):
    # ORT's float requantization vs the NPU's MBQM with shift 13 (scale 4096): acc * 2^13
    # overflows int32 from acc = 262144 on, where the NPU result is undefined.
    assert quantize_multiplier(4096.0) == (1 << 30, 13)
    before = op("requant_float", ACC, scale=4096.0, zp=0, out="int8")
    ob = Obligation("lowering", before, _mbqm(), {"acc": (-1000, 300_000)})
    ds = _all(ob, backends)
    for name, d in ds.items():
        assert d.status == "violated", name
        assert d.witness == {"acc": 262144}, (name, d.witness)
    v = check(ob, cross_check=True)
    assert v.status == "refuted"
    c = v.counterexample
    assert c.assignment == {"acc": 262144} and c.before == 127
    assert c.after is None and c.diff is None
    assert "requant_double" in c.undefined and "fits int32" in c.undefined
    assert "262144" in c.undefined and "undefined" in v.reason
    # Below the overflow the same pair is proven (bitwise: both saturate at 127).
    small = Obligation("lowering", before, _mbqm(), {"acc": (-1000, 262143)})
    assert {d.status for d in _all(small).values()} == {"holds"}


def test_only_the_reference_side_may_be_assumed():
    rng = {"acc": (-(1 << 20), 1 << 20)}
    # reference MBQM undefined beyond |acc| > 262143: those inputs are assumed away
    ref_undefined = Obligation("lowering", _mbqm(), _times_4096(), rng)
    for name, d in _all(ref_undefined).items():
        assert d.status == "holds", name
    # the same pair with the sides swapped: now the NPU is undefined there -> refuted
    npu_undefined = Obligation("lowering", _times_4096(), _mbqm(), rng)
    ds = _all(npu_undefined)
    assert {d.status for d in ds.values()} == {"violated"}
    assert {d.witness["acc"] for d in ds.values()} == {262144}
    v = check(npu_undefined)
    assert v.refuted and v.counterexample.before == 127 and v.counterexample.undefined


def test_a_reference_undefined_everywhere_is_vacuous_in_every_procedure():
    ob = Obligation("lowering", _mbqm(), _times_4096(), {"acc": (1 << 19, 1 << 20)})
    for decide in (segments.decide, enum.decide):
        with pytest.raises(VacuousObligation):
            decide(ob)
    for b in SMT:
        with pytest.raises(VacuousObligation):
            smt.decide(ob, b, Budget(timeout_s=30))


@pytest.mark.parametrize("backends", BACKENDS)
def test_lut_index_outside_the_table_is_an_npu_obligation(backends):
    table = tuple(range(-128, 128))
    lut = dict(table=table, in_type="int8", index_order="offset")
    before = op("lut", op("saturate", X, type="int8"), **lut)
    after = op("lut", X, **lut)
    ob = Obligation("table", before, after, {"x": (-200, 200)})
    ds = _all(ob, backends)
    assert {d.status for d in ds.values()} == {"violated"}
    assert {d.witness["x"] for d in ds.values()} == {128}  # rank(128) < rank(-129)
    v = check(ob)
    assert v.counterexample.before == 127 and "lut" in v.counterexample.undefined
    # the reference side may read outside in_type only where it is assumed: swapped -> holds
    swapped = _all(Obligation("table", after, before, ob.ranges), backends)
    assert {d.status for d in swapped.values()} == {"holds"}


def test_single_rounding_result_overflow_is_an_npu_obligation():
    # (x * 2^30 + 1) >> 1 = x * 2^29 fits int32 for x in [-4, 3] only
    after = op("requant_single", X, multiplier=1 << 30, shift=30, zp=0, out="int8")
    before = op("saturate", op("mul_const", X, c=1 << 29), type="int8")
    ob = Obligation("lowering", before, after, {"x": (-10, 10)})
    ds = _all(ob)
    assert {d.status for d in ds.values()} == {"violated"}
    assert {d.witness["x"] for d in ds.values()} == {4}


@pytest.mark.parametrize("seed", range(6))
def test_segments_equal_enumeration_across_the_precondition_edges(seed):
    # Random fixed-point chains whose ranges straddle the overflow on one or both sides:
    # the exact segment procedure must agree with enumeration point for point.
    rng = np.random.default_rng(seed)
    shift = int(rng.integers(4, 16))
    m = int(rng.integers(1 << 30, (1 << 31) - 1))
    edge = (1 << 31) >> shift
    lo, hi = -edge - int(rng.integers(0, 3000)), edge + int(rng.integers(-5, 3000))
    table = tuple(int(v) for v in rng.integers(-128, 128, 256))
    npu = op(
        "lut",
        op("requant_double", ACC, multiplier=m, shift=shift, zp=3, out="int8"),
        table=table,
        in_type="int8",
        index_order="offset",
    )
    ref = op(
        "lut",
        op("requant_double", ACC, multiplier=m, shift=shift - 1, zp=3, out="int8"),
        table=table,
        in_type="int8",
        index_order="offset",
    )
    for before, after in ((ref, npu), (npu, ref), (npu, npu)):
        ob = Obligation("epilogue", before, after, {"acc": (lo, hi)}, policy="bounded:3")
        s, e = segments.decide(ob), enum.decide(ob)
        assert (s.status, s.witness, s.max_diff) == (e.status, e.witness, e.max_diff)


# --- the simulator refuses --------------------------------------------------------------


def test_postprocess_and_simulator_refuse_an_undefined_requantization():
    # shift 20: acc * 2^20 fits int32 for acc in [-2048, 2047] only
    post = PostProcess(RequantParams("fixed_double", 0, "int8", multiplier=1 << 30, shift=20))
    with pytest.raises(PreconditionViolation, match="fits int32"):
        post.apply(np.array([0, 2048]))
    assert post.apply(np.array([-2048, 0, 2047])).tolist() == [-128, 0, 127]
    prog = codegen.generate(matmul_model(post), FIXED)
    x = np.full((4, 16), 127, dtype=np.int8)
    with pytest.raises(UndefinedResult, match="mm: requant_double"):
        simulator.run(prog, {"x": x})
    x0 = np.full((4, 16), 3, dtype=np.int8)  # the zero point: acc = bias, |bias| < 2000
    out, _ = simulator.run(prog, {"x": x0})
    assert out["y"].shape == (4, 8)


def test_evaluation_without_collected_preconditions_is_strict():
    t = _mbqm()
    with pytest.raises(PreconditionViolation):
        evaluate(t, NUMPY, {"acc": np.array([1 << 20])})
    pre: list = []
    evaluate(t, NUMPY, {"acc": np.array([1 << 20])}, pre)
    assert not bool(np.all(pre[0]))


# --- end to end: the K=1024 model from the issue ---------------------------------------


def _k1024():
    w = np.random.default_rng(0).integers(-127, 128, size=(1024, 2)).astype(np.int8)
    w[:, 0] = 127
    return matmul_activation(K=1024, N=2, M=1, w=w, a_scale=1.0, w_scale=1.0, y_scale=1 / 4096)


def _ort(m, feeds):
    return dict(zip([o.name for o in m.graph.output], session(m).run(None, feeds), strict=True))


def test_k1024_fixed_point_overflow_is_not_proven_and_the_program_equals_ort():
    m = _k1024()
    r = compile_model(m, "bitwise", FIXED, synthesis=False)
    (site,) = r.sites
    assert site.verdict == "refuted" and not site.applied
    cx = site.counterexample
    assert cx.after is None and "undefined" in cx.note and "requant_double" in cx.note
    assert cx.inputs is not None and cx.expected_by == "onnxruntime"
    # the unfused MatMul's own lowering is refuted the same way: it stays on the host
    kinds = {s.onnx_nodes: type(s) for s in r.lowered.steps}
    assert kinds[("mm",)] is HostOnnx
    prog = codegen.generate(r.lowered, FIXED)
    rng = np.random.default_rng(1)
    feeds = [cx.inputs] + [
        {"x": np.full((1, 1024), v, dtype=np.int8)} for v in (127, -128, 0, 1, -1)
    ]
    feeds += [{"x": rng.integers(-128, 128, (1, 1024)).astype(np.int8)} for _ in range(3)]
    for f in feeds:
        out, _ = simulator.run(prog, f)
        np.testing.assert_array_equal(out["y"], _ort(m, f)["y"])


def test_k1024_cli_check_does_not_say_proven(tmp_path):
    import onnx

    p = tmp_path / "k1024.onnx"
    onnx.save(_k1024(), p)
    r = prover("check", str(p), "--target", str(FIXED.path), "--proofs-mode", "off",
               "--no-synthesize")  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert "REFUTED" in r.stdout and "PROVEN" not in r.stdout
    assert "fused undefined" in r.stdout


# --- a scale the fixed-point quantiser cannot represent -----------------------------------


@pytest.mark.parametrize("per_channel", [False, True], ids=["tensor", "column"])
def test_unrepresentable_scale_stays_on_host_and_the_rest_is_checked(per_channel):
    # real scale 1e10 needs shift 34 (column 0 only, per column)
    kw = dict(w_scale=[1.0, 1e-9, 1e-9, 1e-9], per_channel=True) if per_channel else {}
    kw.setdefault("w_scale", 1.0)
    m = matmul_activation(K=16, N=4, M=2, a_scale=1.0, y_scale=1e-10, **kw)
    r = compile_model(m, "bitwise", FIXED)
    d = [d for d in r.diagnostics if d.nodes == ["mm"] and d.code == "unsupported_op"]
    assert d and "shift 34" in d[0].message and "stays on the host" in d[0].message
    kinds = {s.onnx_nodes: type(s) for s in r.lowered.steps}
    assert kinds[("mm",)] is HostOnnx and kinds[("mm",)] is not NpuMatMul
    assert ("act",) in kinds  # the activation is still lowered (NPU or host, with a verdict)
    prog = codegen.generate(r.lowered, FIXED)
    rng = np.random.default_rng(2)
    for _ in range(3):
        f = {"x": rng.integers(-128, 128, (2, 16)).astype(np.int8)}
        out, _ = simulator.run(prog, f)
        np.testing.assert_array_equal(out["y"], _ort(m, f)["y"])


# --- 64-bit words never wrap ---------------------------------------------------------------


def test_a_range_up_to_2_63_is_decided_without_wrapping():
    ob = Obligation("other", op("clip", X, lo=0, hi=1), Const(1), {"x": (1, 1 << 63)})
    assert Encoding(ob).width > 64
    for b in SMT:
        assert smt.decide(ob, b, Budget(timeout_s=30)).status == "holds", b
    assert check(ob).status == "proven"
    bad = Obligation("other", op("clip", X, lo=0, hi=1), Const(0), {"x": (1, 1 << 63)})
    v = check(bad)
    assert v.status == "refuted" and v.counterexample.assignment == {"x": 1}


def test_a_constant_of_2_63_is_never_proven_equal_to_its_64_bit_wrap():
    c = 1 << 63
    ob = Obligation("other", op("add_const", X, c=c), op("add_const", X, c=-c), {"x": (0, 10)})
    for b in SMT:
        assert smt.decide(ob, b, Budget(timeout_s=30)).status == "violated", b
    v = check(ob)
    assert v.status == "unknown" and "64 bits" in v.reason


def test_an_undefined_refutation_round_trips_through_a_proof_store(tmp_path):
    from prover.proofstore import ProofStore

    before = op("requant_float", ACC, scale=4096.0, zp=0, out="int8")
    ob = Obligation("lowering", before, _mbqm(), {"acc": (-1000, 300_000)})
    v1 = check(ob, store=ProofStore(tmp_path, mode="rw"))
    v2 = check(ob, store=ProofStore(tmp_path, mode="ro"))  # served: replayed, not re-decided
    assert v2.cached and v2.refuted and v2.counterexample == v1.counterexample
    assert v2.counterexample.undefined and v2.counterexample.after is None
