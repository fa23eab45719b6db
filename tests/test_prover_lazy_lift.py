"""Only the counterexample a site reports is lifted to an input row (issue 15 item 5)."""

from __future__ import annotations

import pytest
from models import matmul_activation

import prover.counterexample as counterexample
from compiler.api import compile_model
from npu_backend.target import load_target
from prover.api import check, lift_refutation, needs_lift
from prover.obligation import LiftSpec, Obligation
from prover.proofstore import ProofStore
from prover.terms import Var, op

FIXED = load_target("npu_backend/targets/npu_fixed.toml")
ACC = Var("acc")
SPEC = LiftSpec("acc", (3, -5, 7, 11), x_type="int8", bias=9)
# differs from acc wherever acc is odd: refuted, witness reachable
ROUNDED = op("mul_const", op("floordiv_const", ACC, c=2), c=2)


def _ob(lift: LiftSpec = SPEC) -> Obligation:
    return Obligation("epilogue", ACC, ROUNDED, {"acc": (-500, 500)}, "bitwise", lift)


def test_unlifted_refutation_then_lifted_equals_the_eager_verdict(tmp_path):
    eager = check(_ob())
    lazy = check(_ob(), lift=False, store=ProofStore(tmp_path, "rw"))
    assert lazy.status == "refuted" and needs_lift(_ob(), lazy)
    assert lazy.counterexample.lifted_input is None
    assert not list(tmp_path.rglob("*.json"))  # not stored before it is lifted
    done = lift_refutation(_ob(), lazy, store=ProofStore(tmp_path, "rw"))
    assert not needs_lift(_ob(), done)
    for k in ("status", "max_diff", "reason"):
        assert getattr(done, k) == getattr(eager, k)
    assert done.counterexample == eager.counterexample
    assert len(list(tmp_path.rglob("*.json"))) == 1
    # nothing to lift: the verdict itself
    assert lift_refutation(_ob(), done) is done
    assert not needs_lift(_ob(None), check(_ob(None), lift=False))


def test_unreachable_witness_still_becomes_unknown_when_lifted():
    spec = LiftSpec("acc", (2, 4), x_type="int8")  # even accumulators only
    lazy = check(_ob(spec), lift=False)
    assert lazy.status == "refuted"  # not yet known to be unreachable
    done = lift_refutation(_ob(spec), lazy)
    assert done.status == "unknown" and "unreachable" in done.reason
    eager = check(_ob(spec))  # the same verdict and words as deciding it with lifting
    assert (eager.status, eager.reason) == (done.status, done.reason)


def test_served_refutation_replays_its_stored_row_without_searching(tmp_path, monkeypatch):
    check(_ob(), store=ProofStore(tmp_path, "rw"))
    monkeypatch.setattr(counterexample, "lift_row", _no_lift)
    v = check(_ob(), store=ProofStore(tmp_path, "ro"))
    assert v.cached and v.status == "refuted" and v.counterexample.lifted_input is not None


def test_a_stored_row_that_does_not_reproduce_is_a_replay_mismatch():
    from prover.errors import ReplayMismatch

    v = check(_ob())
    bad = tuple(x + 1 for x in v.counterexample.lifted_input)
    with pytest.raises(ReplayMismatch, match="lifted input row"):
        counterexample.replay(_ob(), v.counterexample.assignment, row=bad)


def test_a_stored_row_outside_the_input_type_or_of_another_length_is_a_replay_mismatch():
    """A stored row is data: entries outside x_type reach accumulators no real input row
    reaches, so they must not confirm a refutation (nor a row of the wrong length crash)."""
    from prover.errors import ReplayMismatch

    v = check(_ob())
    a = v.counterexample.assignment["acc"]
    assert a == 1  # 3*300 + 7*(-499) + 11*235 + 9 == 1, but 300 and 235 are not int8
    outside = (300, 0, -499, 235)
    with pytest.raises(ReplayMismatch, match="outside int8"):
        counterexample.replay(_ob(), v.counterexample.assignment, row=outside)
    with pytest.raises(ReplayMismatch, match="2 entries, not 4"):
        counterexample.replay(_ob(), v.counterexample.assignment, row=(1, 2))
    with pytest.raises(ReplayMismatch, match="outside int8"):
        counterexample.replay(_ob(), v.counterexample.assignment, row=(-6.5, -2, 0, 0))
    ok = counterexample.replay(_ob(), v.counterexample.assignment, row=(-6, -2, 0, 0))
    assert ok.lifted_input == (-6, -2, 0, 0) and ok.diff == 1


def _forge(path, **cex_fields) -> None:
    """Edit a stored refutation's counterexample and recompute the (keyless) digest."""
    import json

    from prover.proofstore import _sha, canonical

    rec = json.loads(path.read_text())
    for where in (rec["counterexample"], rec["verdict"]["counterexample"]):
        where.update(cex_fields)
    body = {k: v for k, v in rec.items() if k != "digest"}
    rec["digest"] = _sha(canonical(body))
    path.write_text(json.dumps(rec))


def test_a_served_refutation_reports_what_its_replay_computes(tmp_path):
    """A record's before/after are data: the served verdict carries the replayed values."""
    honest = check(_ob(), store=ProofStore(tmp_path, "rw"))
    (path,) = tmp_path.rglob("*.json")
    _forge(path, before=7, after=-7, diff=14)
    v = check(_ob(), store=ProofStore(tmp_path, "ro"))
    assert v.cached and v.status == "refuted"
    assert v.counterexample == honest.counterexample and v.reason == honest.reason
    assert (v.counterexample.before, v.counterexample.after) == (1, 0)


def test_a_stored_refutation_without_its_input_row_is_not_served(tmp_path):
    """check never stores a liftable refutation without a row; one that says no row
    reaches it is decided afresh (rw) or missing (ro), never served as refuted."""
    from prover.errors import StoreMiss

    spec = LiftSpec("acc", (2, 4), x_type="int8")  # even accumulators only
    witness = check(_ob(), store=ProofStore(tmp_path, "rw")).counterexample.assignment
    (path,) = tmp_path.rglob("*.json")
    odd = Obligation("epilogue", ACC, ROUNDED, {"acc": (-500, 500)}, "bitwise", spec)
    assert witness["acc"] % 2 == 1  # unreachable through `spec`
    path.unlink()
    lazy = check(odd, lift=False)
    ProofStore(tmp_path, "rw").put(odd, lazy)  # as a tampered store would hold it
    (path,) = tmp_path.rglob("*.json")
    _forge(path, lift_note="no row", lifted_input=None)
    with pytest.raises(StoreMiss, match="no input row reaches"):
        check(odd, store=ProofStore(tmp_path, "ro"))
    v = check(odd, store=ProofStore(tmp_path, "rw"))
    assert not v.cached and v.status == "unknown" and "unreachable" in v.reason


def _no_lift(*a, **k):
    raise AssertionError("a row was searched for")


def test_a_refuted_per_channel_site_lifts_one_witness(monkeypatch):
    calls = []
    real = counterexample.lift_row
    monkeypatch.setattr(counterexample, "lift_row", lambda s, v: calls.append(v) or real(s, v))
    m = matmul_activation(K=32, N=24, M=1, per_channel=True)
    r = compile_model(m, "bitwise", FIXED, synthesis=False)
    (s,) = r.sites
    refuted = [
        h for h in s.obligations if getattr(r.context.state.verdicts[h], "status", "") == "refuted"
    ]
    assert s.verdict == "refuted" and len(refuted) > 1  # several groups refuted ...
    assert len(calls) == 1  # ... one lifted: the reported one
    reported = r.context.state.verdicts[s.obligation_hash]
    assert reported.counterexample.lifted_input is not None
    assert s.counterexample.assignment == reported.counterexample.assignment
