"""Proofs are tied to the kernel's semantics: a change of meaning invalidates them."""

from __future__ import annotations

import json

import pytest

import prover.obligation as O
from prover.api import check
from prover.obligation import Obligation
from prover.proofstore import ProofStore
from prover.terms import Var, op


def _ob() -> Obligation:
    acc = Var("acc")
    return Obligation(
        "epilogue",
        op("requant_float", acc, scale=0.01, zp=0, out="int8"),
        op("requant_float", acc, scale=0.01, zp=0, out="int8"),
        {"acc": (-5000, 5000)},
        "bitwise",
    )


def test_hash_covers_semantics_version(monkeypatch):
    h1 = _ob().hash
    monkeypatch.setattr(O, "SEMANTICS_VERSION", "999")
    assert _ob().hash != h1


def test_proof_from_other_semantics_is_not_served(tmp_path, monkeypatch):
    store = ProofStore(tmp_path)
    assert check(_ob(), store=store).status == "proven"
    monkeypatch.setattr(O, "SEMANTICS_VERSION", "999")
    v = check(_ob(), store=store)
    assert v.status == "proven" and not v.cached  # decided afresh, not read back
    records = [json.loads(p.read_text())["obligation"] for p in tmp_path.rglob("*.json")]
    old = [r for r in records if r["semantics"] != "999"]
    assert len(records) == 2 and len(old) == 1
    with pytest.raises(ValueError, match="semantics"):
        Obligation.from_json(old[0])
