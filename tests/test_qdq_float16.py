"""float16 scales in QDQ activations (issue 10, finding 4): the kernel's model of ONNX Runtime
equals ORT bit for bit, and the frontend uses it.

What ORT 1.32's CPU provider computes for DequantizeLinear -> Sigmoid|Tanh|Relu ->
QuantizeLinear with float16 scales (measured; identical at optimisation levels off and all):
the dequantized value rounded to float16, the float32 MLAS kernel on it, its result rounded
to float16, and QuantizeLinear dividing in float32 up to opset 22 and in float16 from opset
23 on (QuantizeLinear-23's default `precision` is the scale type).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh
from qdq_models import check_end_to_end, finish, ort_run, qdq_table_model

from compiler.frontend.reader import to_ir
from compiler.ir.semantics import run_graph
from compiler.ort.reference_host import host_profile
from compiler.ort.tables import TableSpec, reference_table
from prover.domain import KernelError
from prover.lut import build_ort_qdq_table
from prover.mlas import host_uses_fma

FUSED = host_uses_fma()
ACTS = ("Sigmoid", "Tanh", "Relu")

# (act, x_scale, x_zp, y_scale): float16 scale pairs (int8 -> int8, y_zp -128) where reading
# the scales as float32 (the frontend before the fix) gives a different table than ORT.
FLOAT32_READING_DIFFERS = [
    ("Sigmoid", 0.06732177734375, -8, 0.005130767822265625),
    ("Sigmoid", 0.0921630859375, 18, 0.00737762451171875),
    ("Sigmoid", 0.058929443359375, 9, 0.0095672607421875),
]


def _all_inputs(t: str) -> dict[str, np.ndarray]:
    info = np.iinfo(t)
    return {"x": np.arange(info.min, info.max + 1).astype(t)}


def _random_case(rng):
    while True:
        xs = float(np.float16(10 ** rng.uniform(-7.5, 4.5)))
        ys = float(np.float16(10 ** rng.uniform(-7.5, 4.5)))
        if 0 < xs < np.inf and 0 < ys < np.inf:
            break
    it, ot = (("int8", "uint8"), ("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8"))[
        rng.integers(4)
    ]
    ii, oi = np.iinfo(it), np.iinfo(ot)
    xz, yz = int(rng.integers(ii.min, ii.max + 1)), int(rng.integers(oi.min, oi.max + 1))
    return dict(in_type=it, x_scale=xs, x_zp=xz, out_type=ot, y_scale=ys, y_zp=yz)


@pytest.mark.parametrize("opset", [19, 21, 23, 25])
@pytest.mark.parametrize("act", ACTS)
def test_float16_table_model_equals_onnxruntime_at_both_levels(act, opset):
    """Random float16 scale pairs from 3e-8 to 3e4 (subnormal to overflowing products)."""
    rng = np.random.default_rng(opset * 10 + ACTS.index(act))
    precision = "float16" if opset >= 23 else "float32"
    for _ in range(6):
        c = _random_case(rng)
        m = qdq_table_model(act, scale_type="float16", opset=opset, **c)
        feeds = _all_inputs(c["in_type"])
        want = build_ort_qdq_table(
            act.lower(), c["x_scale"], c["x_zp"], c["in_type"], c["y_scale"], c["y_zp"],
            c["out_type"], fused=FUSED, scale_type="float16", quantize_precision=precision,
        )  # fmt: skip
        for level in ("off", "all"):
            got = ort_run(m, feeds, level)[0].astype(np.int64)
            np.testing.assert_array_equal(got, want, err_msg=f"{c}, level {level}")


def test_the_division_precision_matters():
    """Both QuantizeLinear divisions are needed: some pair tells float32 and float16 apart."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        c = _random_case(rng)
        args = (c["x_scale"], c["x_zp"], c["in_type"], c["y_scale"], c["y_zp"], c["out_type"])
        a = build_ort_qdq_table("sigmoid", *args, scale_type="float16")
        b = build_ort_qdq_table(
            "sigmoid", *args, scale_type="float16", quantize_precision="float16"
        )
        if not np.array_equal(a, b):
            return
    pytest.fail("float32 and float16 division agree on 200 random pairs")


@pytest.mark.parametrize("case", FLOAT32_READING_DIFFERS, ids=lambda c: f"{c[0]}-{c[1]:.4g}")
@pytest.mark.parametrize("opset", [21, 23])
def test_frontend_builds_the_float16_table(case, opset):
    act, xs, xz, ys = case
    m = qdq_table_model(
        act, x_scale=xs, x_zp=xz, y_scale=ys, y_zp=-128, scale_type="float16", opset=opset
    )
    g, _ = to_ir(m, reference=host_profile())
    feeds = _all_inputs("int8")
    np.testing.assert_array_equal(run_graph(g, feeds)["y"], ort_run(m, feeds)[0])
    f32 = reference_table(TableSpec("qdq", act, xs, xz, "int8", ys, -128, "int8"), fma=FUSED)
    lut = next(n for n in g.nodes if n.op == "lut")
    assert tuple(lut.attrs["table"]) != f32  # the float32 reading really is wrong here


def test_float16_table_end_to_end(tmp_path):
    """Was: PROVEN while the program differed from ORT by one at some inputs."""
    act, xs, xz, ys = FLOAT32_READING_DIFFERS[0]
    m = qdq_table_model(
        act, x_scale=xs, x_zp=xz, y_scale=ys, y_zp=-128, scale_type="float16", opset=21
    )
    check_end_to_end(m, _all_inputs("int8"), tmp_path)


def test_float16_fused_site_end_to_end(tmp_path):
    """QLinearMatMul -> DequantizeLinear(f16) -> Sigmoid -> QuantizeLinear(f16).

    The NPU's table (float32 arithmetic) differs from ORT's float16 one at a reachable
    accumulator: the fusion is refuted (was: PROVEN) and the program still equals ORT.
    """
    rng = np.random.default_rng(0)
    _, xs, xz, ys = FLOAT32_READING_DIFFERS[1]
    inits = [nh.from_array(rng.integers(-127, 128, (16, 4)).astype(np.int8), "W")]
    inits += [
        nh.from_array(np.array(v, dtype=dt), n)
        for n, v, dt in [
            ("as", 0.02, np.float32), ("az", 0, np.int8), ("ws", 0.01, np.float32),
            ("wz", 0, np.int8), ("hs", 0.05, np.float32), ("hz", xz, np.int8),
            ("xs", xs, np.float16), ("ys", ys, np.float16), ("yz", -128, np.int8),
        ]
    ]  # fmt: skip
    nodes = [
        oh.make_node("QLinearMatMul", ["x", "as", "az", "W", "ws", "wz", "hs", "hz"], ["h"]),
        oh.make_node("DequantizeLinear", ["h", "xs", "hz"], ["f"], name="dq"),
        oh.make_node("Sigmoid", ["f"], ["g"], name="act"),
        oh.make_node("QuantizeLinear", ["g", "ys", "yz"], ["y"], name="q"),
    ]
    m = finish(
        nodes,
        [oh.make_tensor_value_info("x", TP.INT8, [8, 16])],
        [oh.make_tensor_value_info("y", TP.INT8, [8, 4])],
        inits,
        21,
    )
    onnx.checker.check_model(m, full_check=True)
    feeds = {"x": rng.integers(-128, 128, (8, 16)).astype(np.int8)}
    check_end_to_end(m, feeds, tmp_path, verdict="REFUTED")


def test_scale_not_representable_in_its_type_is_a_kernel_error():
    with pytest.raises(KernelError, match="not a finite positive float16"):
        build_ort_qdq_table("sigmoid", 0.1, 0, "int8", 0.01, 0, "int8", scale_type="float16")
    with pytest.raises(KernelError, match="float32 scale is divided in float32"):
        build_ort_qdq_table(
            "sigmoid", 0.5, 0, "int8", 0.25, 0, "int8", quantize_precision="float16"
        )


def test_dequantize_type_must_fit_the_scale_type():
    # a float32 scale never yields a float16 DequantizeLinear output; unknown types refused
    with pytest.raises(KernelError, match="unsupported dequantize type 'float16'"):
        build_ort_qdq_table("sigmoid", 0.5, 0, "int8", 0.25, 0, "int8", dequantize_type="float16")
    with pytest.raises(KernelError, match="unsupported dequantize type 'bfloat16'"):
        build_ort_qdq_table(
            "sigmoid", 0.5, 0, "int8", 0.25, 0, "int8", scale_type="float16",
            dequantize_type="bfloat16",
        )  # fmt: skip
    # float32 (the cast on the scale) is accepted with float16 scales
    t = build_ort_qdq_table(
        "sigmoid", 0.5, 0, "int8", 0.25, 0, "int8", scale_type="float16", dequantize_type="float32"
    )
    assert t.shape == (256,)
