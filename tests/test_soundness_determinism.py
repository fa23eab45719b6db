"""Determinism: the same model checked twice gives the same verdicts, counterexamples and hashes.

In process (compile twice; every obligation decided twice) and as two `prover check
--format json` subprocess runs whose reports agree in everything but timings.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundness_corpus as C

from prover.api import check

REPO = Path(__file__).resolve().parents[1]
SHOWCASE = str(C.EXAMPLES / "showcase.onnx")
CASES = [
    ("examples/showcase.onnx", "npu_float"),
    ("examples/showcase.onnx", "npu_fixed"),
    ("models.matmul_activation[per_channel]", "npu_fixed"),
    ("models.two_sites", "npu_fixed"),
]


def _site_key(s, with_inputs: bool = False) -> tuple:
    cx = s.counterexample
    cx_key = None
    if cx is not None:
        ins = None
        if with_inputs and cx.inputs is not None:
            ins = {k: np.asarray(v).tolist() for k, v in cx.inputs.items()}
        cx_key = (dict(cx.assignment), cx.before, cx.after, ins, cx.element.get("value"))
    reason = None if s.reason is None else (s.reason.code, s.reason.message)
    return (
        s.id,
        s.pattern,
        tuple(s.nodes),
        s.verdict,
        reason,
        s.obligation_hash,
        tuple(s.obligations),
        cx_key,
    )


def _verdict_key(v, with_row: bool = False) -> dict:
    d = v.to_dict()
    for k in ("time_ms", "details", "cached"):
        d.pop(k)
    if d["counterexample"] is not None and not with_row:
        d["counterexample"].pop("lifted_input")
    return d


@pytest.mark.parametrize("model,target", CASES)
def test_compile_twice_same_sites_and_counterexamples(model, target):
    m = C.corpus()[model]
    r1, obs1 = C.compile_recording(m, target)
    r2, obs2 = C.compile_recording(m, target)
    assert sorted(obs1) == sorted(obs2)
    assert [_site_key(s) for s in r1.sites] == [_site_key(s) for s in r2.sites]
    synthesised = any("requant" in d for s in r1.sites for d in s.details)  # default on
    assert any(s.verdict == "refuted" for s in r1.sites) or target == "npu_float" or synthesised


@pytest.mark.parametrize("model,target", CASES)
def test_compile_twice_same_whole_model_inputs(model, target):
    m = C.corpus()[model]
    keys = [[_site_key(s, True) for s in C.compile_recording(m, target)[0].sites] for _ in range(3)]
    assert keys[0] == keys[1] == keys[2]


@pytest.mark.parametrize("model,target", CASES[:2])
def test_every_obligation_decided_twice_identically(model, target):
    _, obs = C.compile_recording(C.corpus()[model], target)
    assert obs
    for h, ob in sorted(obs.items()):
        v1, v2 = check(ob), check(ob)
        assert v1.obligation_hash == v2.obligation_hash == h
        assert _verdict_key(v1) == _verdict_key(v2), h


@pytest.mark.parametrize("model,target", CASES)
def test_every_obligation_lifts_to_the_same_row_twice(model, target):
    _, obs = C.compile_recording(C.corpus()[model], target)
    for h, ob in sorted(obs.items()):
        keys = [_verdict_key(check(ob), with_row=True) for _ in range(3)]
        assert keys[0] == keys[1] == keys[2], h


def _strip_times(x):
    if isinstance(x, dict):
        return {k: _strip_times(v) for k, v in x.items() if "time" not in k}
    if isinstance(x, list):
        return [_strip_times(v) for v in x]
    return x


def _prover_json(tmp: Path, *extra: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "compiler.cli.prover", "check", SHOWCASE, "--format", "json",
         "--proofs-mode", "off", "--no-progress", *extra],
        capture_output=True, text=True, cwd=tmp, timeout=300,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr  # the showcase has a refuted site
    return json.loads(r.stdout)


@pytest.mark.parametrize("target", ["npu_float", pytest.param("npu_fixed", marks=pytest.mark.slow)])
def test_two_cli_runs_give_identical_reports(tmp_path, target):
    # rounding only: the showcase's npu_fixed sites are refuted (synthesis would prove them)
    a = _prover_json(tmp_path, "--target", target, "--no-synthesize")
    b = _prover_json(tmp_path, "--target", target, "--no-synthesize")
    assert _strip_times(a) == _strip_times(b)
    refuted = [s for s in a["sites"] if s["verdict"] == "refuted"]
    assert refuted and all(s["counterexample"] and s["obligation"] for s in refuted)
    assert _strip_times(a) != {}, "report is empty"
