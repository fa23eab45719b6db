"""A hand-made `Report` with one site of every verdict, for the report-writer tests."""

from __future__ import annotations

import numpy as np

from compiler.report.model import Reason, Report, SiteReport, WholeModelCounterexample
from prover.verdict import Counterexample


def sample_report(model: str = "examples/showcase.onnx") -> Report:
    """Proven, refuted (with a counterexample), unknown and rejected sites."""
    cex = WholeModelCounterexample(
        local=Counterexample({"acc": -4321}, 39, 40, 1),
        inputs={"X": np.arange(-8, 8, dtype=np.int8).reshape(1, 16)},
        expected={"Y": np.array([[39, 12]], dtype=np.int8)},
        actual={"Y": np.array([[40, 12]], dtype=np.int8)},
    )
    sites = [
        SiteReport("s0", "MatMul->Sigmoid", ("mm_ok", "sig_ok"), "proven", time_ms=3.2),
        SiteReport(
            "s1",
            "MatMul->Sigmoid",
            ("mm_lut", "sig_lut"),
            "refuted",
            Reason("refuted", "table entry -20 differs: ONNX Runtime 39, target 40"),
            time_ms=12.5,
            counterexample=cex,
            obligation_hash="ab" * 32,
        ),
        SiteReport(
            "s2",
            "MatMul->Sigmoid",
            ("mm_u", "sig_u"),
            "unknown",
            Reason("unknown", "budget of 0.001 s ran out"),
            time_ms=1.0,
        ),
        SiteReport(
            "s3",
            "MatMul->Sigmoid",
            ("mm_shared", "sig_shared"),
            "rejected",
            Reason("multiple_users", "mm_shared output also feeds graph output; kept unfused"),
        ),
    ]
    return Report(model, "bitwise", "npu_float", sites, tool_version="0.1.0")
