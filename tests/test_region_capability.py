"""Unary regions and the target's capability (issue 23 deliverables 1 and 5).

Each compute path of a target file declares the region kinds its postprocessor fuses
(`[compute.X] regions`) and its table sizes (`lut_sizes`); a region of any other kind or
size is refused on that path with the capability reason (`unsupported_function`, or
`unsupported_intermediate_type` for 16-bit codes), whatever another path, the standalone
unit or a similar function declares. Also: regions after QGemm, after MatMulInteger with
its Requantize, and after an elementwise op.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import onnx
import pytest
from models import random_inputs
from region_models import conv_region, eltwise_region, gemm_region, integer_region, matmul_region
from test_unary_regions import _int16_model

from compiler.api import compile_model
from compiler.ir.semantics import run_graph
from compiler.ort.tables import session
from npu_backend import codegen, simulator
from npu_backend.target import Target, TargetError, load_target, parse_target
from prover.verdict import ReasonCode

TARGETS = Path(__file__).resolve().parents[1] / "npu_backend" / "targets"
FLOAT = load_target(TARGETS / "npu_float.toml")
FIXED = load_target(TARGETS / "npu_fixed.toml")


def _target(name: str, **paths: dict) -> Target:
    """A shipped target with keys of its `[compute.<path>]` tables replaced."""
    data = tomllib.loads((TARGETS / f"{name}.toml").read_text())
    for path, keys in paths.items():
        data["compute"][path].update(keys)
    return parse_target(data, f"<{name} modified>")


def _equal(m: onnx.ModelProto, r, target: Target, ort: bool = True) -> None:
    prog = codegen.generate(r.lowered, target)
    inp = random_inputs(m, 0)
    ref = session(m, "default").run(None, inp)[0] if ort else run_graph(r.original, inp)["y"]
    np.testing.assert_array_equal(ref, simulator.run(prog, inp)[0]["y"])


def _site(m: onnx.ModelProto, target: Target):
    r = compile_model(m, "bitwise", target)
    (site,) = r.sites
    return r, site


# -- where regions are found ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["hardswish", "chain"])
def test_region_after_qgemm_is_proven_and_equals_ort(kind):
    """QGemm (com.microsoft: ONNX's inference gives its output no type; the region reads
    the type its output zero point states)."""
    m = gemm_region(kind)
    r, site = _site(m, FLOAT)
    assert site.pattern == f"gemm+{'hardswish' if kind == 'hardswish' else 'table'}"
    assert site.verdict == "proven", site.reason
    assert [n.op for n in r.graph.nodes] == ["fused"]
    _equal(m, r, FLOAT)


def test_region_after_matmulinteger_and_its_requantize_is_proven():
    """MatMulInteger -> Requantize (double rounding) -> a HardSigmoid region on npu_fixed,
    whose MatMul path requantizes with double rounding and declares the hardsigmoid region:
    one fused MatMul. (On npu_float the double-rounding Requantize is the seed's refusal.)"""
    m = integer_region("hardsigmoid")
    r, site = _site(m, FIXED)
    assert site.pattern == "matmul+requantize+hardsigmoid" and site.verdict == "proven"
    assert [n.op for n in r.graph.nodes] == ["fused"]
    _equal(m, r, FIXED, ort=False)  # ORT has no ai.npufusion Requantize
    _, site = _site(m, FLOAT)
    assert site.reason.code == ReasonCode.INTERVENING_REQUANTIZE
    assert "'double'" in site.reason.message and "'float32'" in site.reason.message


@pytest.mark.parametrize("kind", ["hardswish", "silu"])
def test_region_after_an_elementwise_op_is_one_npu_table(kind):
    """After a QLinearAdd with a constant (no compute op to fuse into): the region is one
    table on the standalone unit, equal to ORT."""
    m = eltwise_region(kind)
    r = compile_model(m, "bitwise", FLOAT)
    assert r.sites == []
    assert [n.op for n in r.graph.nodes] == ["lut"]  # the QLinearAdd is a table too
    assert [type(s).__name__ for s in r.lowered.steps] == ["NpuLut"]
    assert r.graph.nodes[0].attrs["source"] == "region"
    _equal(m, r, FLOAT)


def _moved(op: str, out_shape: list[int], **attrs) -> onnx.ModelProto:
    """conv_region('hardswish') with `op` between the HardSwish and its QuantizeLinear."""
    m = conv_region("hardswish")
    hsw = next(n for n in m.graph.node if n.name == "hsw")
    hsw.output[0] = "g0"
    ins = ["g0", "reps"] if op == "Tile" else ["g0"]
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.array([1, 1, 1, 2]), "reps"))
    node = onnx.helper.make_node(op, ins, ["g"], name=op.lower(), **attrs)
    m.graph.node.insert(list(m.graph.node).index(hsw) + 1, node)
    for d, v in zip(m.graph.output[0].type.tensor_type.shape.dim, out_shape, strict=True):
        d.dim_value = v
    return m


def test_data_movement_inside_the_region_is_refused():
    """A Tile between the HardSwish and its QuantizeLinear: data movement inside, and no
    8-bit value before it, so the region cannot close."""
    r, site = _site(_moved("Tile", [1, 4, 2, 6]), FLOAT)
    assert site.verdict == "rejected" and site.reason.code == ReasonCode.REGION_REDUCTION
    assert "'tile' (Tile)" in site.reason.message
    assert "fused" not in [n.op for n in r.graph.nodes]


def test_a_transpose_ort_moves_out_of_the_float_island_ends_the_region_before_it():
    """ORT's default session moves a Transpose out of a float island (Q/DQ around it): the
    region as ORT runs it is the HardSwish alone, fused; the Transpose runs after it."""
    m = _moved("Transpose", [1, 4, 3, 2], perm=[0, 1, 3, 2])
    r, site = _site(m, FLOAT)
    assert site.verdict == "proven" and "transpose" not in site.nodes
    assert [n.op for n in r.graph.nodes][0] == "fused"
    _equal(m, r, FLOAT)


# -- target capability, per path ----------------------------------------------------------


@pytest.mark.parametrize(
    "build,path,other", [(matmul_region, "MatMul", "Conv"), (conv_region, "Conv", "MatMul")]
)
def test_region_kind_is_declared_per_path_never_inherited(build, path, other):
    """A path whose `regions` lacks 'silu' refuses a SiLU region even though it builds the
    silu function and loads any table, and the other path declares it."""
    kinds = sorted(FLOAT.compute(path).regions - {"silu"})
    t = _target("npu_float", **{path: {"regions": kinds}})
    assert "silu" in t.compute(other).regions and "silu" in t.compute(path).functions
    r, site = _site(build("silu"), t)
    assert site.verdict == "rejected" and site.reason.code == ReasonCode.UNSUPPORTED_FUNCTION
    assert (
        f"the {path} postprocessor of '{t.name}' declares no 'silu' region" in site.reason.message
    )
    assert "fused" not in [n.op for n in r.graph.nodes]
    # the other path, unchanged, fuses it
    other_build = conv_region if build is matmul_region else matmul_region
    assert _site(other_build("silu"), t)[1].verdict == "proven"


@pytest.mark.parametrize("build,path", [(matmul_region, "MatMul"), (conv_region, "Conv")])
def test_a_loaded_table_region_needs_the_table_kind(build, path):
    """A chain (HardSwish, requantized, Tanh) is a 'table' region: a path that loads tables
    (`functions` has 'table') but does not declare the 'table' region kind refuses it."""
    kinds = sorted(FLOAT.compute(path).regions - {"table"})
    t = _target("npu_float", **{path: {"regions": kinds}})
    _, site = _site(build("chain"), t)
    assert site.reason.code == ReasonCode.UNSUPPORTED_FUNCTION
    assert "declares no 'table' region" in site.reason.message


@pytest.mark.parametrize(
    "build,path,kind",
    [(matmul_region, "MatMul", "hardswish"), (conv_region, "Conv", "hardswish"),
     (conv_region, "Conv", "chain")],
)  # fmt: skip
def test_npu_fixed_refuses_regions_it_does_not_declare(build, path, kind):
    _, site = _site(build(kind), FIXED)
    assert site.reason.code == ReasonCode.UNSUPPORTED_FUNCTION
    assert f"the {path} postprocessor of 'npu_fixed' declares no" in site.reason.message


def test_a_target_without_regions_fuses_none():
    t = _target("npu_float", MatMul={"regions": []})
    _, site = _site(matmul_region("hardswish"), t)
    assert site.reason.code == ReasonCode.UNSUPPORTED_FUNCTION
    assert "(its regions: none)" in site.reason.message


def test_a_region_kind_the_path_cannot_build_is_a_target_error():
    with pytest.raises(TargetError, match=r"regions \['silu'\]: neither in functions"):
        _target("npu_fixed", MatMul={"regions": ["sigmoid", "silu"]})


def test_16_bit_codes_are_refused_with_the_paths_table_sizes():
    """The refusal names the compute path's table sizes; a path listing 65536-entry
    tables still refuses (region tables are taken for 8-bit codes only), saying so."""
    _, site = _site_of_region(_int16_model(), FLOAT)
    assert site.reason.code == ReasonCode.UNSUPPORTED_INTERMEDIATE_TYPE
    assert "the MatMul postprocessor of 'npu_float' has tables of [256] entries" in (
        site.reason.message
    )
    big = _target("npu_float", MatMul={"lut_sizes": [256, 65536]})
    _, site = _site_of_region(_int16_model(), big)
    assert site.reason.code == ReasonCode.UNSUPPORTED_INTERMEDIATE_TYPE
    assert "lists 65536-entry tables" in site.reason.message


def _site_of_region(m: onnx.ModelProto, target: Target):
    r = compile_model(m, "bitwise", target)
    (site,) = [s for s in r.sites if "region" in s.pattern]
    return r, site


def test_region_after_a_second_requantize_absorbs_it():
    """QLinearMatMul -> Requantize -> HardSigmoid region (deliverable 4 with a region): the
    Requantize of one int8 code is composed into the region's table on npu_float; on
    npu_fixed (which declares the hardsigmoid region) the seed's refusal stands."""
    from models import requantize_node

    m = matmul_region("hardsigmoid")
    m.graph.node[0].output[0] = "u0"
    m.graph.node.insert(1, requantize_node("u0", "u", multiplier=1518500250, shift=-1))
    r, site = _site(m, FLOAT)
    assert site.pattern.startswith("matmul+requantize+") and site.verdict == "proven"
    assert [n.op for n in r.graph.nodes] == ["fused"]
    _equal(m, r, FLOAT, ort=False)  # ORT has no ai.npufusion Requantize
    _, site = _site(m, FIXED)
    assert site.reason.code == ReasonCode.INTERVENING_REQUANTIZE
