"""Ledger: fusion savings measured by simulating the fused and the unfused program."""

import dataclasses

import pytest
from test_backend_support import fused_post, matmul_model, requant_post, x_input

from npu_backend.ledger import LedgerError, ledger
from npu_backend.lowered import LoweredModel
from npu_backend.target import load_target

FLOAT = load_target()
FIXED = load_target("npu_backend/targets/npu_fixed.toml")


@pytest.mark.parametrize("target", [FLOAT, FIXED], ids=["float", "fixed"])
@pytest.mark.parametrize("m", [4, 9])
def test_fused_saves_the_intermediate_tensor(target, m):
    model = matmul_model(fused_post(target, clip=(-100, 100)), m=m)
    (e,) = ledger(model, target, x_input(m=m))
    assert e.site == "mm" and e.onnx_nodes == ("MatMul_0", "Sigmoid_0")
    assert (e.elements, e.element_bytes) == (m * 8, 1)
    assert e.bytes_not_written == e.expected_bytes == m * 8
    assert e.bytes_not_read == m * 8
    assert e.instructions_before == e.instructions_after + 1  # the standalone activation
    assert e.table_loads_added == 0  # the activation needed the same table
    assert e.param_loads_added == 0
    assert e.to_json()["expected_bytes"] == m * 8


def test_only_fused_sites_get_entries():
    assert ledger(matmul_model(requant_post(FLOAT)), FLOAT) == []


def test_two_sites_measured_separately():
    model = matmul_model(fused_post(FLOAT))
    st = model.steps[0]
    second = dataclasses.replace(
        st, name="mm2", out="y2", a_zp=0, bias=None, post=fused_post(FLOAT, "tanh")
    )
    model = LoweredModel(model.inputs, ["y", "y2"], model.constants, [st, second])
    entries = ledger(model, FLOAT)
    assert [e.site for e in entries] == ["mm", "mm2"]
    assert all(e.bytes_not_written == 32 for e in entries)


def test_disagreeing_forms_are_a_bug(monkeypatch):
    model = matmul_model(fused_post(FLOAT))
    import npu_backend.ledger as L

    real = L.unfuse

    def broken(step):
        mm, act = real(step)
        return [mm, dataclasses.replace(act, table=tuple(reversed(act.table)))]

    monkeypatch.setattr(L, "unfuse", broken)
    with pytest.raises(LedgerError, match="differ"):
        ledger(model, FLOAT)
