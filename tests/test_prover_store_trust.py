"""A proof record is never trusted on its word: re-decided, replayed, or signature-verified."""

from __future__ import annotations

import hashlib
import json

import pytest

from prover.api import check
from prover.errors import StoreCorrupt, StoreMiss
from prover.obligation import Obligation
from prover.proofstore import ProofStore
from prover.samples import lut_of, requant, sigmoid_table
from prover.terms import Var, canonical
from prover.trust import KEY_ENV, resolve_key

ACC = Var("acc")
TABLE = sigmoid_table()
KEY = b"team-secret-proof-key"


def _ob(zp_after: int = 2) -> Obligation:
    b = lut_of(requant("requant_double", ACC, multiplier=1 << 30, shift=-9, zp=2), TABLE)
    a = lut_of(requant("requant_double", ACC, multiplier=1 << 30, shift=-9, zp=zp_after), TABLE)
    return Obligation("epilogue", b, a, {"acc": (-50000, 50000)}, "bitwise")


def _forge_proven(path) -> None:
    """What an attacker can do without the key: refuted -> proven, digest recomputed."""
    rec = json.loads(path.read_text())
    for r in (rec, rec["verdict"]):
        r["counterexample"] = None
    rec["verdict"]["status"] = "proven"
    rec["verdict"]["max_diff"] = 0
    body = {k: v for k, v in rec.items() if k != "digest"}
    rec["digest"] = hashlib.sha256(canonical(body).encode()).hexdigest()
    path.write_text(json.dumps(rec))


def test_served_proven_is_re_decided(tmp_path):
    o = _ob(2)
    check(o, store=ProofStore(tmp_path, "rw"))
    v = check(o, store=ProofStore(tmp_path, "ro"))
    assert v.cached and v.status == "proven"
    assert v.details["served"].startswith("re-decided by ")
    assert v.details["record"] == str(ProofStore(tmp_path).path(o.hash))


def test_served_refutation_is_replayed(tmp_path):
    o = _ob(3)
    check(o, store=ProofStore(tmp_path, "rw"))
    v = check(o, store=ProofStore(tmp_path, "ro"))
    assert v.status == "refuted" and v.details["served"] == "replayed"


@pytest.mark.parametrize("mode", ["ro", "rw"])
def test_forged_proven_with_recomputed_digest_is_rejected_naming_the_record(tmp_path, mode):
    o = _ob(3)
    store = ProofStore(tmp_path, "rw")
    check(o, store=store)
    _forge_proven(store.path(o.hash))
    with pytest.raises(StoreCorrupt, match=f"{o.hash}.json says proven.*violated"):
        check(o, store=ProofStore(tmp_path, mode))


def test_beyond_budget_an_unsigned_record_is_missing_in_ro(tmp_path):
    o = _ob(2)
    check(o, store=ProofStore(tmp_path, "rw"))
    with pytest.raises(StoreMiss, match=f"{o.hash}.json could not be re-decided.*is unsigned"):
        check(o, store=ProofStore(tmp_path, "ro", recheck_budget_s=0))


def test_beyond_budget_an_unsigned_record_is_decided_afresh_and_signed_in_rw(tmp_path):
    o = _ob(2)
    check(o, store=ProofStore(tmp_path, "rw"))
    v = check(o, store=ProofStore(tmp_path, "rw", key=KEY, recheck_budget_s=0))
    assert not v.cached and v.status == "proven"
    again = check(o, store=ProofStore(tmp_path, "ro", key=KEY, recheck_budget_s=0))
    assert again.cached and again.details["served"] == "signature verified"


def test_signature_needs_the_same_key(tmp_path):
    o = _ob(2)
    check(o, store=ProofStore(tmp_path, "rw", key=KEY))
    with pytest.raises(StoreMiss, match="does not verify"):
        check(o, store=ProofStore(tmp_path, "ro", key=b"other", recheck_budget_s=0))
    with pytest.raises(StoreMiss, match="no proof key is configured"):
        check(o, store=ProofStore(tmp_path, "ro", recheck_budget_s=0))
    # within the budget the record is re-decided, whatever its signature
    v = check(o, store=ProofStore(tmp_path, "ro", key=b"other"))
    assert v.details["served"].startswith("re-decided")


def test_a_forged_signed_record_fails_its_signature(tmp_path):
    o = _ob(3)
    store = ProofStore(tmp_path, "rw", key=KEY)
    check(o, store=store)
    _forge_proven(store.path(o.hash))  # keeps the old signature, which no longer matches
    with pytest.raises(StoreMiss, match="does not verify"):
        check(o, store=ProofStore(tmp_path, "ro", key=KEY, recheck_budget_s=0))


def test_resolve_key(tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    assert resolve_key() is None
    monkeypatch.setenv(KEY_ENV, " abc \n")
    assert resolve_key() == b"abc"
    f = tmp_path / "k"
    f.write_bytes(b"from-file\n")
    assert resolve_key(f) == b"from-file"
    f.write_bytes(b"  \n")
    with pytest.raises(ValueError, match="empty"):
        resolve_key(f)
    with pytest.raises(ValueError, match="recheck budget"):
        ProofStore(tmp_path, "ro", recheck_budget_s=-1)
