"""Every non-proven site carries its reason code and the user's action in every format."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from cli_helpers import prover

import compiler.passes.legality  # noqa: F401 - registers the rules whose actions are read below
from compiler.ir.site import ACTIONS

MODEL = str(
    Path(__file__).resolve().parent.parent / "examples/digits/digits_matmul_qdq_s8s8_pt.onnx"
)
ACTION = ACTIONS["unsupported_intermediate_type"]  # uint8 intermediates on npu_fixed


def _check(fmt: str, *more: str) -> str:
    r = prover("check", MODEL, "--proofs-mode", "off", "--target", "npu_fixed", "--no-synthesize",
               "--format", fmt, *more)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_every_reason_code_has_an_action():
    from compiler.report.model import REASON_CODES

    assert set(REASON_CODES) <= set(ACTIONS)
    assert "float_accumulation" in ACTIONS and "unsupported_op" in ACTIONS


def test_site_actions_in_text_json_sarif_junit():
    text = _check("text", "-v")  # the action is in -v (a line stays short without)
    rejected = [line for line in text.splitlines() if line.startswith("REJECTED")]
    assert len(rejected) == 2 and all(f"; action: {ACTION}" in line for line in rejected)
    sites = json.loads(_check("json"))["sites"]
    assert [s["reason"]["action"] for s in sites] == [ACTION, ACTION]
    assert all("'Sigmoid" in s["reason"]["message"] for s in sites)
    results = json.loads(_check("sarif"))["runs"][0]["results"]
    site_results = [x for x in results if x["ruleId"] == "unsupported_intermediate_type"]
    assert len(site_results) == 2
    assert all(
        x["properties"]["action"] == ACTION and ACTION in x["message"]["text"] for x in site_results
    )
    root = ET.fromstring(_check("junit"))
    skipped = [el.get("message") for el in root.iter("skipped")]
    assert len(skipped) == 2 and all(
        s.startswith("[unsupported_intermediate_type]") and ACTION in s for s in skipped
    )
