"""compile_model options: proof store, check_options (as the CLIs pass them), progress, result."""

from __future__ import annotations

from models import matmul_activation, two_sites

from compiler.api import compile_model
from prover.errors import StoreMiss


def test_proof_store_rw_then_ro(tmp_path):
    m = matmul_activation(K=64, N=16)
    first = compile_model(m, "bitwise", None, proofs_dir=tmp_path, proofs_mode="rw")
    assert first.sites[0].verdict == "proven"
    assert list(tmp_path.rglob("*.json"))
    again = compile_model(m, "bitwise", None, proofs_dir=tmp_path, proofs_mode="ro")
    assert again.sites[0].verdict == "proven"
    assert again.context.verdicts[again.sites[0].obligation_hash].cached
    # a miss in ro mode is never a pass: unknown, and the hash is listed for the CI gate
    m2 = matmul_activation(K=64, N=16, y_scale=0.07)
    miss = compile_model(m2, "bitwise", None, proofs_dir=tmp_path, proofs_mode="ro")
    s = miss.sites[0]
    assert s.verdict == "unknown" and "no proof record" in s.reason.message
    assert isinstance(miss.context.verdicts[s.obligation_hash], StoreMiss)
    assert not any(n.op == "fused" for n in miss.graph.nodes)


def test_check_options_and_progress():
    calls = []
    r = compile_model(
        two_sites(),
        "bitwise",
        None,
        check_options={"timeout_s": 5.0, "solver": "auto", "jobs": 2},
        progress=lambda d, t: calls.append((d, t)),
    )
    assert r.context.timeout_s == 5.0
    assert calls == [(1, 2), (2, 2)]
    assert r.site("site-1").nodes == ["mm2", "act2"] and r.site("act1").id == "site-0"


def test_policy_and_target_defaults():
    r = compile_model(matmul_activation())
    assert str(r.context.policy) == "bitwise" and r.context.target.name == "npu_float"
    assert r.summary["proven"] == 1
