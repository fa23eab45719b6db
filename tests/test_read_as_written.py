"""Under the integer QDQ reading the IR is built from ORT's rewrite of the model; the model as
written is read too (`reader._read_as_written`, its IR discarded) only where that is needed:
before, when it has float16 values (a float16 QDQ group ORT computes differently at levels
default and off is refused there), and after a failure to read ORT's graph, so that the
error names the user's own nodes."""

from __future__ import annotations

import pytest
from region_models import qdq_conv_region
from test_f16_context import _group

import compiler.frontend.reader as reader
from compiler.errors import FrontendError
from prover.reference import get_profile

ONNX = get_profile("onnx")


def _counting(monkeypatch, fail: str | None = None) -> list[str]:
    """Record each reading of the model as written (raising `fail` there, if given)."""
    calls: list[str] = []
    real = reader._read_as_written

    def counted(m, reference):
        calls.append(m.graph.name)
        if fail is not None:
            raise FrontendError(fail)
        return real(m, reference)

    monkeypatch.setattr(reader, "_read_as_written", counted)
    return calls


def test_a_model_without_float16_is_not_read_as_written(monkeypatch):
    calls = _counting(monkeypatch)
    g, m = reader.to_ir(qdq_conv_region("silu"), reference=ONNX)
    assert calls == []
    assert any(n.op_type == "QLinearConv" for n in m.graph.node)  # ORT's graph was read


def test_a_model_with_float16_is_read_as_written_first(monkeypatch):
    """Negative: the float16 group model is read as written (where its level-dependent
    group is refused: `test_f16_context`)."""
    calls = _counting(monkeypatch)
    with pytest.raises(FrontendError, match="levels default and off"):
        reader.to_ir(_group("Identity"), reference=ONNX)
    assert len(calls) == 1


def test_a_failure_to_read_orts_graph_is_named_by_the_model_as_written(monkeypatch):
    """ORT's graph fails to read: the model as written is read, and its own error comes
    first; where it reads fine, the failure of ORT's graph is the one raised."""

    def broken(*a, **k):
        raise FrontendError("ORT's graph")

    monkeypatch.setattr(reader, "_built", broken)
    calls = _counting(monkeypatch)
    with pytest.raises(FrontendError, match="ORT's graph"):
        reader.to_ir(qdq_conv_region("silu"), reference=ONNX)
    assert len(calls) == 1
    _counting(monkeypatch, fail="the user's node")
    with pytest.raises(FrontendError, match="the user's node"):
        reader.to_ir(qdq_conv_region("silu"), reference=ONNX)
