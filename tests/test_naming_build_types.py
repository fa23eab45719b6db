"""The naming build (the user's own QDQ model, read only so errors name its nodes; its IR
is discarded) takes its host values' types and shapes from the whole model's strict
inference instead of inferring each host node again: the same types and shapes the nodes'
own inference gives, without it. The build that is kept still infers each node."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from call_counter import count_calls

import compiler.ort.host as host
from compiler.frontend.batch import dynamic_inputs, with_batch
from compiler.frontend.checked import validate
from compiler.frontend.reader import _Builder

SMALL = Path(__file__).resolve().parents[1] / "examples" / "zoo" / "small"


def _model(name: str) -> onnx.ModelProto:
    m = validate(onnx.load(str(SMALL / name))).proto
    dyn = dynamic_inputs(m)
    return with_batch(m, dyn, 1) if dyn else m


def _types(g) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {k: (v.dtype, tuple(v.shape)) for k, v in g.values.items()}


@pytest.mark.parametrize(
    "name", ["tiny_cnn__qdq_u8s8_pc.onnx", "mlp__qdq_s8s8_pt.onnx", "tiny_bert__qdq_u8s8_pt.onnx"]
)
def test_the_naming_build_reads_the_whole_models_types_which_are_the_nodes_own(name, monkeypatch):
    m = _model(name)
    calls = count_calls(monkeypatch, host, "infer_host_outputs")
    named = _Builder(m, naming=True).run()
    skipped = len(calls)
    kept = _Builder(m).run()  # infers each host node itself
    assert len(calls) > skipped  # negative: the kept build still asks each node
    hosted = [n for n in kept.nodes if n.op == "host_onnx"]
    assert hosted and skipped < len(hosted)
    shared = _types(named).keys() & _types(kept).keys()
    assert {o for n in hosted for o in n.outputs} & shared
    assert {k: _types(named)[k] for k in shared} == {k: _types(kept)[k] for k in shared}
