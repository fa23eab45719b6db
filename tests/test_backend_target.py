"""Target descriptions: the shipped targets, and bad TOML rejected with clear errors."""

import tomllib

import pytest

from npu_backend.target import (
    DEFAULT_TARGET,
    TargetError,
    load_target,
    onnx_requant_params,
    parse_target,
    shipped_targets,
)
from prover.requant import onnx_requant_scale, quantize_multiplier

FIXED_PATH = "npu_backend/targets/npu_fixed.toml"


def _data(path=DEFAULT_TARGET):
    with open(path, "rb") as f:
        return tomllib.load(f)


def test_default_target_is_float():
    t = load_target()
    assert t.name == "npu_float"
    mm = t.compute("MatMul")
    assert mm.requant_scheme == "float32"
    assert {"sigmoid", "tanh", "gelu"} <= mm.functions
    assert mm.lut_sizes == frozenset({256})
    assert t.tables.slots == 8 and t.tables.entries == 256
    assert t.compute("Gemm") is None


def test_shipped_targets_differ():
    a, b = load_target(), load_target(FIXED_PATH)
    assert set(shipped_targets()) >= {"npu_float", "npu_fixed"}
    ma, mb = a.compute("MatMul"), b.compute("MatMul")
    assert ma.requant_scheme == "float32" and mb.requant_scheme == "fixed_double"
    # tanh/gelu fuse on MatMul only on the float target; on the fixed one only on Conv
    assert "tanh" in ma.functions and "tanh" not in mb.functions
    assert "tanh" in b.compute("Conv").functions
    assert ma.intermediate_types != mb.intermediate_types
    assert ma.fused_structures != mb.fused_structures
    assert a.lut_builder != b.lut_builder
    assert a.tables.slots != b.tables.slots
    assert a.memory_size("sram") != b.memory_size("sram")


def test_requant_helper_uses_target_scheme():
    a, b = load_target(), load_target(FIXED_PATH)
    s = float(onnx_requant_scale(0.02, 0.01, 0.07))
    assert a.requant_params(s, 3, "int8").scale == s
    rq = b.requant_params(s, 3, "int8")
    assert (rq.multiplier, rq.shift) == quantize_multiplier(s)
    p = onnx_requant_params(0.02, 0.01, 0.07, 3, "int8", "fixed_double")
    assert p == rq
    with pytest.raises(TargetError, match="no compute op"):
        a.requant_params(s, 3, "int8", op="Gemm")


def _mutate(fn):
    d = _data()
    fn(d)
    return d


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["compute"]["MatMul"].pop("functions"), "missing required key 'functions'"),
        (lambda d: d["compute"]["MatMul"].update(functions=["sigmoid", "swoosh"]), "swoosh"),
        (lambda d: d["compute"]["MatMul"].update(requant_scheme="fixed"), "requant_scheme"),
        (lambda d: d["compute"]["MatMul"].update(clip="yes"), "expected a boolean"),
        (lambda d: d["compute"]["MatMul"].update(colour="red"), "unknown key"),
        (
            lambda d: d["compute"]["MatMul"].update(
                fused_structures=["tiled"], structures=["plain"]
            ),
            "subset",
        ),
        (lambda d: d["compute"].update(Softmax={}), "unknown compute op"),
        (lambda d: d["tables"].update(slots=0), "positive"),
        (lambda d: d["tables"].update(entries=512), "256 entries"),
        (lambda d: d["memories"].pop("sram"), "'sram'"),
        (lambda d: d["memories"]["sram"].update(size=True), "expected an integer"),
        (lambda d: d["lut_builder"].update(index_order="reversed"), "index_order"),
        (lambda d: d.pop("target"), "'target'"),
        (lambda d: d.update(extra=1), "unknown key"),
    ],
)
def test_bad_target_rejected(mutate, message):
    with pytest.raises(TargetError, match=message):
        parse_target(_mutate(mutate))


def test_bad_files_rejected(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[target\nname = 'x'")
    with pytest.raises(TargetError, match="not valid TOML"):
        load_target(bad)
    with pytest.raises(TargetError, match="cannot read"):
        load_target(tmp_path / "missing.toml")
    ok = tmp_path / "ok.toml"
    ok.write_text(open(DEFAULT_TARGET).read().replace('name = "npu_float"', 'name = "mine"'))
    assert load_target(ok).name == "mine"


@pytest.mark.parametrize(
    "chosen", [["multiplier"], ["multiplier", "shift"], ["shift", "table", "zero_point"]]
)
def test_synthesis_without_multiplier_shift_and_table_is_rejected(chosen):
    data = _data(FIXED_PATH)
    data["compute"]["MatMul"]["synthesis"] = chosen
    with pytest.raises(TargetError, match="synthesis must include multiplier, shift and table"):
        parse_target(data)
    data["compute"]["MatMul"]["synthesis"] = ["multiplier", "shift", "table"]
    assert parse_target(data).compute("MatMul").synthesis == {"multiplier", "shift", "table"}
