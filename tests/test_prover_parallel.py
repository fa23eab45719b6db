"""`--jobs`: deciding obligations in worker processes changes nothing but the wall time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from prover.errors import VacuousObligation
from prover.obligation import Obligation
from prover.parallel import check_many
from prover.samples import index_map_flatten
from prover.terms import Var, op

REPO = Path(__file__).resolve().parents[1]


def _obligations() -> list[Obligation]:
    acc = Var("acc")
    fl = op("requant_float", acc, scale=0.0123, zp=3, out="int8")
    fx = op("requant_double", acc, multiplier=1690499072, shift=-6, zp=3, out="int8")
    return [
        Obligation("epilogue", fl, fx, {"acc": (-40000, 40000)}, "bitwise"),
        Obligation("epilogue", fl, fx, {"acc": (-40000, 40000)}, "bounded:1"),
        Obligation("epilogue", fl, fl, {"acc": (-40000, 40000)}, "bitwise"),
        index_map_flatten(3, 5, transposed=True),
        Obligation("epilogue", fl, fx, {"acc": (5, 4)}, "bitwise"),  # vacuous: an error
    ]


def _key(v):
    if isinstance(v, Exception):
        return type(v).__name__
    cx = v.counterexample
    return (v.status, v.max_diff, v.obligation_hash, None if cx is None else cx.assignment)


def test_two_workers_give_the_same_verdicts_as_one():
    obs = _obligations()
    one = check_many(obs, jobs=1, timeout_s=10.0)
    two = check_many(obs, jobs=2, timeout_s=10.0)
    assert [_key(v) for v in one] == [_key(v) for v in two]
    assert [_key(v)[0] for v in one[:4]] == ["refuted", "proven", "proven", "refuted"]
    assert isinstance(two[4], VacuousObligation)


def test_cli_jobs_does_not_change_the_report(tmp_path):
    reports = []
    for jobs in ("1", "2"):
        out = tmp_path / f"r{jobs}.json"
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "compiler.cli.prover",
                "check",
                "examples/showcase.onnx",
                "--proofs-mode",
                "off",
                "--format",
                "json",
                "-o",
                str(out),
                "--jobs",
                jobs,
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert p.returncode == 1, p.stderr
        sites = json.loads(out.read_text())["sites"]
        for s in sites:
            s.pop("time_ms")
        reports.append(sites)
    assert reports[0] == reports[1]
    assert [s["verdict"] for s in reports[0]] == ["proven", "refuted", "rejected", "rejected"]
