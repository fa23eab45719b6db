"""`compiler.phases`: exclusive CPU spans per phase, filled by a compile, written on request."""

from __future__ import annotations

import json
import time
from pathlib import Path

from compiler import phases
from compiler.api import compile_model

ROOT = Path(__file__).resolve().parent.parent


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_an_inner_phase_is_not_charged_to_the_outer_one():
    before = dict(phases.TOTALS)
    with phases.phase("t_outer"):
        _spin(0.01)
        with phases.phase("t_inner"):
            _spin(0.03)
    outer = phases.TOTALS["t_outer"] - before.get("t_outer", 0.0)
    inner = phases.TOTALS["t_inner"] - before.get("t_inner", 0.0)
    assert 0.03 <= inner < 0.06 and 0.01 <= outer < 0.03


def test_a_compile_fills_the_pipeline_phases_and_the_file_is_written(tmp_path, monkeypatch):
    before = dict(phases.TOTALS)
    compile_model(str(ROOT / "examples" / "matmul_sigmoid.onnx"))
    grew = {k for k, v in phases.TOTALS.items() if v > before.get(k, 0.0)}
    assert {"load", "frontend", "legality", "prove", "lower"} <= grew
    assert grew <= set(phases.PHASES)
    out = tmp_path / "phases.json"
    monkeypatch.setenv(phases.ENV, str(out))
    phases._write()
    got = json.loads(out.read_text())
    assert set(got) == {"phases", "cpu_s", "peak_rss_kb"} and got["phases"]["prove"] > 0
