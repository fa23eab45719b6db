"""Every committed proof record still holds: re-decided from scratch, cross-checked.

A record's digest stops accidents, not a hand-made record; the store re-decides a
served "proven" within its recheck budget. CI additionally re-decides every
committed obligation with two procedures and requires the recorded verdict.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prover.api import check
from prover.errors import StoreCorrupt
from prover.obligation import Obligation
from prover.proofstore import ProofStore
from prover.terms import Var, op
from prover.verdict import Verdict

PROOFS = Path(__file__).resolve().parents[1] / "proofs"
RECORDS = sorted(PROOFS.glob("??/*.json"))


def disagreements(path: Path) -> list[str]:
    """What a fresh, cross-checked decision says differently from the record at `path`."""
    rec = json.loads(path.read_text())
    ob = Obligation.from_json(rec["obligation"])
    out = []
    if not ob.hash == rec["obligation_hash"] == path.stem:
        out.append("hash")
    v = check(ob, timeout_s=30.0, store=None, cross_check=True)
    recorded = rec["verdict"]
    if v.status != recorded["status"]:
        out.append(f"status {recorded['status']} recorded, {v.status} now")
    if v.max_diff != recorded["max_diff"]:
        out.append(f"max_diff {recorded['max_diff']} recorded, {v.max_diff} now")
    if v.status == "refuted" and recorded["status"] == "refuted":
        if v.counterexample.assignment != recorded["counterexample"]["assignment"]:
            out.append("counterexample")
    return out


def test_the_store_has_records():
    assert len(RECORDS) >= 10


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem[:12] for p in RECORDS])
def test_committed_record_re_decides_to_the_same_verdict(path):
    assert disagreements(path) == []


def test_a_forged_proof_with_a_valid_digest_is_caught(tmp_path):
    acc = Var("acc")
    ob = Obligation(
        "epilogue",
        op("requant_float", acc, scale=0.5, zp=0, out="int8"),
        op("requant_double", acc, multiplier=1 << 30, shift=0, zp=0, out="int8"),
        {"acc": (-100, 100)},
        "bitwise",
    )
    forged = Verdict("proven", ob.policy, ob.hash, "segments", 1.0, 0)
    ProofStore(tmp_path).put(ob, forged)
    path = next(tmp_path.glob("??/*.json"))
    with pytest.raises(StoreCorrupt, match="says proven"):  # served records are re-decided
        check(ob, store=ProofStore(tmp_path, mode="ro"))
    assert disagreements(path)[0] == "status proven recorded, refuted now"
