"""Fuzzer finding 5: a refutation of a site whose result feeds another op names the policy
it was decided under (bitwise, compiler.ir.policy_scope), not the run's looser policy."""

from __future__ import annotations

import json

import models as M
import onnx
from cli_helpers import prover


def _sites(tmp_path, model, policy: str) -> list[dict]:
    p = tmp_path / "m.onnx"
    onnx.save(model, p)
    r = prover("check", p, "--proofs-mode", "off", "--no-progress", "--target", "npu_fixed",
               "--no-synthesize", "--policy", policy, "--format", "json")  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)["sites"]


def test_interior_site_refutation_names_bitwise(tmp_path):
    sites = _sites(tmp_path, M.matmul_activation(double_activation=True), "bounded:2")
    refuted = [s for s in sites if s["verdict"] == "refuted"]
    assert refuted, sites
    msg = refuted[0]["reason"]["message"]
    assert "under bitwise (the result feeds further ops, so bounded:2 applies" in msg, msg
    assert "|diff|=" in msg and "under bounded:2" not in msg


def test_interior_site_under_bitwise_says_plain_bitwise(tmp_path):
    sites = _sites(tmp_path, M.matmul_activation(double_activation=True), "bitwise")
    msg = next(s for s in sites if s["verdict"] == "refuted")["reason"]["message"]
    assert msg.endswith("under bitwise"), msg
