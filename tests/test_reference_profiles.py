"""Named reference profiles end to end (issue 10, finding 1): uint8 x int8 pair saturation.

The same u8s8 model is proven under the default `onnx` profile (with a
`reference_divergence` finding carrying an input row) and refuted, with a replayed
whole-model input, under `ort-x86-avx2`; with 7-bit (reduce_range) weights it is
proven under both with the same obligations. Expected outputs are recomputed here
without the compiler: MLAS's pair-saturating accumulator, ORT's float32
requantization and ORT's own QLinearSigmoid.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest
import u8s8_models as U
from cli_helpers import assert_one_line_error, npuc, prover
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

from compiler.api import compile_model
from compiler.ir.semantics import run_graph
from compiler.ort.reference_host import host_profile
from compiler.ort.tables import session
from prover.inttypes import UINT8
from prover.pair_saturation import column_accs, pair_saturating_acc
from prover.reference import DEFAULT_PROFILE, ONNX, ORT_X86_AVX2, Accumulation, get_profile
from prover.requant import onnx_requant_scale, requant_float_concrete


def _init(m: onnx.ModelProto, name: str) -> np.ndarray:
    return next(numpy_helper.to_array(i) for i in m.graph.initializer if i.name == name)


def _ort_sigmoid(m: onnx.ModelProto, q: np.ndarray) -> np.ndarray:
    """ORT's QLinearSigmoid with the model's parameters applied to uint8 `q`."""
    names = ["y_s", "y_zp", "o_s", "o_zp"]
    node = oh.make_node("QLinearSigmoid", ["q", *names], ["o"], domain="com.microsoft")
    g = oh.make_graph(
        [node],
        "sig",
        [oh.make_tensor_value_info("q", TP.UINT8, list(q.shape))],
        [oh.make_tensor_value_info("o", TP.UINT8, list(q.shape))],
        [numpy_helper.from_array(_init(m, n), n) for n in names],
    )
    sm = oh.make_model(
        g, opset_imports=[oh.make_opsetid("", 21), oh.make_opsetid("com.microsoft", 1)]
    )
    sm.ir_version = 10
    return session(sm).run(None, {"q": q.astype(np.uint8)})[0]


def independent_output(m: onnx.ModelProto, x: np.ndarray, saturating: bool) -> np.ndarray:
    """The model's output on `x` from the kernel's accumulators and ORT's sigmoid."""
    w, a_zp = _init(m, "w"), int(_init(m, "a_zp"))
    acc_fn = (
        pair_saturating_acc
        if saturating
        else (lambda a, b, z, _: (a.astype(np.int64) - z) @ b.astype(np.int64))
    )
    acc = acc_fn(x.astype(np.int64), w.astype(np.int64), a_zp, 0)
    s = onnx_requant_scale(_init(m, "a_s"), _init(m, "w_s"), _init(m, "y_s"))
    q = requant_float_concrete(acc, s, int(_init(m, "y_zp")), UINT8)
    return _ort_sigmoid(m, np.asarray(q))


@pytest.fixture(scope="module")
def saturable():
    return U.qlinear_matmul_sigmoid(U.saturable_weights())


@pytest.fixture(scope="module")
def seven_bit():
    return U.qlinear_matmul_sigmoid(U.seven_bit_weights())


def test_u8s8_proven_under_onnx_with_a_divergence_finding(saturable):
    r = compile_model(saturable, reference="onnx")
    assert [s.verdict for s in r.sites] == ["proven"]
    (f,) = r.context.findings
    assert f["code"] == "reference_divergence" and f["nodes"] == ["mm_quant"]
    assert f["column"] in f["columns"]
    w = _init(saturable, "w")[:, f["column"]]
    exact, sat = column_accs(f["input_row"], w, 128, 0, 0)
    assert (exact, sat) == (f["exact_acc"], f["saturating_acc"]) and exact != sat
    host_sat = host_profile().u8s8_accumulation == Accumulation.PAIR_SATURATING_INT16
    assert f["host_saturates"] is host_sat and f["reference_saturates"] is False


def test_u8s8_refuted_under_avx2_with_a_replayed_input(saturable):
    r = compile_model(saturable, reference="ort-x86-avx2")
    (site,) = r.sites
    assert site.verdict == "refuted" and "reduce_range" in site.reason.message
    cx = site.counterexample
    x = cx.inputs["x"]
    # expected = the saturating reference, recomputed without the compiler; actual = exact
    np.testing.assert_array_equal(cx.expected["y"], independent_output(saturable, x, True))
    np.testing.assert_array_equal(cx.actual["y"], independent_output(saturable, x, False))
    assert not np.array_equal(cx.expected["y"], cx.actual["y"])
    np.testing.assert_array_equal(
        run_graph(r.original, {"x": x}, reference=ORT_X86_AVX2)["y"], cx.expected["y"]
    )
    # this host's ORT: equal to the expected output iff it saturates too
    got = session(saturable).run(None, {"x": x})[0]
    if host_profile().u8s8_accumulation == Accumulation.PAIR_SATURATING_INT16:
        np.testing.assert_array_equal(got, cx.expected["y"])
    else:
        np.testing.assert_array_equal(got, run_graph(r.original, {"x": x}, reference=ONNX)["y"])
        assert "reference_divergence" in cx.note
    # the bare matmul is not lowered to the NPU either
    codes = {d.code for d in r.diagnostics if "mm_quant" in d.nodes}
    assert "reference_divergence" in codes


def test_seven_bit_weights_proven_under_both_with_the_same_obligations(seven_bit):
    a = compile_model(seven_bit, reference="onnx")
    b = compile_model(seven_bit, reference="ort-x86-avx2")
    assert [s.verdict for s in a.sites] == [s.verdict for s in b.sites] == ["proven"]
    assert a.sites[0].obligations == b.sites[0].obligations
    assert not a.context.findings and not b.context.findings


def test_ir_follows_the_profile_only_for_u8s8(saturable, seven_bit, rng):
    x = rng.integers(0, 256, (2, 16)).astype(np.uint8)
    x[:, :6] = 255
    g = compile_model(saturable).original
    assert not np.array_equal(
        run_graph(g, {"x": x}, reference=ONNX)["y"],
        run_graph(g, {"x": x}, reference=ORT_X86_AVX2)["y"],
    )
    g7 = compile_model(seven_bit).original
    np.testing.assert_array_equal(
        run_graph(g7, {"x": x}, reference=ONNX)["y"],
        run_graph(g7, {"x": x}, reference=ORT_X86_AVX2)["y"],
    )


def test_reference_named_in_every_report_format(saturable, tmp_path):
    path = tmp_path / "u8s8.onnx"
    onnx.save(saturable, path)
    common = ("check", path, "--reference", "ort-x86-avx2", "--no-progress")
    p = prover(*common, "--format", "json")
    assert p.returncode == 1, p.stderr
    j = json.loads(p.stdout)
    assert j["reference"] == ORT_X86_AVX2.to_dict()
    assert any(f["code"] == "reference_divergence" for f in j["findings"])
    assert j["sites"][0]["counterexample"]["inputs"]["x"]["dtype"] == "uint8"
    text = prover(*common).stdout
    assert ", reference ort-x86-avx2 (" in text.splitlines()[0]
    sarif = json.loads(prover(*common, "--format", "sarif").stdout)
    assert sarif["runs"][0]["properties"]["reference"]["name"] == "ort-x86-avx2"
    junit = ET.fromstring(prover(*common, "--format", "junit").stdout)
    props = {e.get("name"): e.get("value") for e in junit.iter("property")}
    assert props["reference"] == "ort-x86-avx2"
    j0 = json.loads(prover("check", path, "--no-progress", "--format", "json").stdout)
    assert j0["reference"]["name"] == "onnx" and j0["summary"]["proven"] == 1


def test_ort_host_resolves_by_probing(saturable, tmp_path):
    path = tmp_path / "u8s8.onnx"
    onnx.save(saturable, path)
    p = prover("check", path, "--reference", "ort-host", "--no-progress", "--format", "json")
    ref = json.loads(p.stdout)["reference"]
    assert ref["name"].startswith("ort-host=")
    # probed in a process of the same kind as the CLI's (under qemu-user only the test
    # process itself is emulated)
    probe = "from compiler.ort.reference_host import host_profile as h; print(h().to_dict())"
    same = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert ref == ast.literal_eval(same.stdout.strip())


def test_bogus_reference_is_a_one_line_error(saturable, tmp_path):
    path = tmp_path / "u8s8.onnx"
    onnx.save(saturable, path)
    assert_one_line_error(prover("check", path, "--reference", "bogus"), "bogus", "onnx")
    out = tmp_path / "p.npuprog"
    assert_one_line_error(npuc("compile", path, "-o", out, "--reference", "bogus"), "bogus")
    assert not out.exists()


def test_help_documents_the_reference_option():
    for p in (prover("check", "--help"), npuc("compile", "--help")):
        flat = " ".join(p.stdout.split())
        assert (
            "--reference {onnx,ort-x86-avx2,onnx-qdq-float,ort-x86-avx2-qdq-float,ort-host}" in flat
        )


def test_emitted_replay_under_avx2_holds_on_this_host(saturable, tmp_path):
    """--emit-tests under ort-x86-avx2 records the reference; the replay checks pass on
    any host (a divergent host is compared through its own profile) and catch a forgery."""
    from compiler.regress.replay import check_compiled, check_original

    path = tmp_path / "u8s8.onnx"
    onnx.save(saturable, path)
    out = tmp_path / "cex"
    p = prover("check", path, "--reference", "ort-x86-avx2", "--no-progress", "--emit-tests", out)
    assert p.returncode == 1, p.stderr
    (d,) = [m.parent for m in out.glob("*/meta.json")]
    assert json.loads((d / "meta.json").read_text())["reference"] == ORT_X86_AVX2.to_dict()
    check_original(d)
    check_compiled(d)
    with np.load(d / "counterexample.npz") as z:
        data = dict(z)
    data["expected_0"] = data["expected_0"].copy()
    data["expected_0"].flat[0] ^= 1
    np.savez(d / "counterexample.npz", **data)
    with pytest.raises(AssertionError):
        check_original(d)


def test_qdq_reading_defaults_to_integer_and_float_profiles_exist():
    """The default profile reads QDQ groups as ORT's default-level integer kernels; each
    machine profile has a float-reading twin differing only in that field."""
    from prover.reference import ONNX_QDQ_FLOAT, QdqReading

    assert get_profile(DEFAULT_PROFILE).qdq_reading is QdqReading.INTEGER
    assert ONNX_QDQ_FLOAT.qdq_reading is QdqReading.FLOAT
    for name in ("onnx", "ort-x86-avx2"):
        i, f = get_profile(name), get_profile(f"{name}-qdq-float")
        assert (i.u8s8_accumulation, i.mlas_fma) == (f.u8s8_accumulation, f.mlas_fma)
        assert f.to_dict()["qdq_reading"] == "float" and i.to_dict()["qdq_reading"] == "integer"
        assert "float graph" in f.summary and "integer kernels" in i.summary
