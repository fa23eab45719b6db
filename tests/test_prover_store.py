"""Proof store: records, cached answers, tampering, ro/off modes, hash determinism."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from prover.api import check
from prover.errors import StoreCorrupt, StoreMiss
from prover.obligation import Obligation
from prover.proofstore import ProofStore
from prover.samples import index_map_flatten, lut_of, requant, sigmoid_table
from prover.terms import Var

ACC = Var("acc")
TABLE = sigmoid_table()


def _ob(zp_after=2, policy="bitwise"):
    b = lut_of(requant("requant_double", ACC, multiplier=1 << 30, shift=-9, zp=2), TABLE)
    a = lut_of(requant("requant_double", ACC, multiplier=1 << 30, shift=-9, zp=zp_after), TABLE)
    return Obligation("epilogue", b, a, {"acc": (-50000, 50000)}, policy)


def test_record_written_and_answered_from_cache(tmp_path):
    store = ProofStore(tmp_path, "rw")
    o = _ob(3)
    v = check(o, store=store)
    p = store.path(o.hash)
    assert p.exists() and p.parent.name == o.hash[:2]
    rec = json.loads(p.read_text())
    assert rec["obligation_hash"] == o.hash and rec["verdict"]["status"] == "refuted"
    assert rec["policy"] == "bitwise" and rec["solver"] == v.solver and rec["solver_version"]
    assert rec["budget"]["timeout_s"] == 10.0 and rec["counterexample"]["assignment"]
    again = check(o, store=store)
    assert again.cached and again.status == "refuted"
    assert again.counterexample == v.counterexample


def test_tampered_record_is_rejected(tmp_path):
    store = ProofStore(tmp_path, "rw")
    o = _ob(3)
    check(o, store=store)
    p = store.path(o.hash)
    rec = json.loads(p.read_text())
    rec["verdict"]["status"] = "proven"
    rec["verdict"]["counterexample"] = None
    p.write_text(json.dumps(rec))
    with pytest.raises(StoreCorrupt, match="digest"):
        check(o, store=store)


def test_record_with_recomputed_digest_but_other_obligation_is_rejected(tmp_path):
    import hashlib

    from prover.terms import canonical

    store = ProofStore(tmp_path, "rw")
    o = _ob(2)
    check(o, store=store)
    p = store.path(o.hash)
    rec = json.loads(p.read_text())
    rec["obligation"]["ranges"]["acc"] = [0, 1]  # content no longer matches the hash
    body = {k: v for k, v in rec.items() if k != "digest"}
    rec["digest"] = hashlib.sha256(canonical(body).encode()).hexdigest()
    p.write_text(json.dumps(rec))
    with pytest.raises(StoreCorrupt, match="does not match its hash"):
        check(o, store=store)


def test_ro_mode_miss_is_an_error_and_hit_is_served(tmp_path):
    o = _ob(2)
    with pytest.raises(StoreMiss):
        check(o, store=ProofStore(tmp_path, "ro"))
    check(o, store=ProofStore(tmp_path, "rw"))
    v = check(o, store=ProofStore(tmp_path, "ro"))
    assert v.cached and v.status == "proven"
    # ro never writes
    o2 = _ob(4)
    with pytest.raises(StoreMiss):
        check(o2, store=ProofStore(tmp_path, "ro"))
    assert not ProofStore(tmp_path).path(o2.hash).exists()


def test_off_mode_neither_reads_nor_writes(tmp_path):
    o = _ob(2)
    v = check(o, store=ProofStore(tmp_path, "off"))
    assert not v.cached and not any(tmp_path.iterdir())
    with pytest.raises(ValueError, match="mode"):
        ProofStore(tmp_path, "wr")


def test_unknown_is_not_stored(tmp_path):
    from prover.samples import lift_for  # noqa: F401

    store = ProofStore(tmp_path, "rw")
    # Float staircase vs fixed point: Bitwuzla cannot finish in a 0.05 s budget.
    b = requant("requant_float", ACC, scale=0.0123, zp=0)
    a = requant("requant_double", ACC, multiplier=1691056306, shift=-6, zp=0)
    o = Obligation("lowering", b, a, {"acc": (-(1 << 20), 1 << 20)}, "bounded:1")
    v = check(o, solver="bitwuzla", timeout_s=0.05, store=store)
    assert v.status == "unknown" and v.reason
    assert not store.path(o.hash).exists()


def test_policy_is_part_of_the_hash_and_hash_is_stable_across_processes():
    o = _ob(2)
    assert o.hash == _ob(2).hash
    assert o.hash != _ob(2, "bounded:1").hash and o.hash != _ob(3).hash
    code = "from prover.samples import index_map_flatten;print(index_map_flatten(5, 7).hash)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == index_map_flatten(5, 7).hash
    assert Obligation.from_json(json.loads(o.canonical)).hash == o.hash
