"""QDQ activation models at any opset (13..23) and an end-to-end check through the real CLIs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from cli_helpers import npuc, prover
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

SCALE_NP = {"float32": np.float32, "float16": np.float16, "bfloat16": None}
INT_TP = {"int8": TP.INT8, "uint8": TP.UINT8}


def finish(nodes, inputs, outputs, inits, opset: int) -> onnx.ModelProto:
    """A checked model with the default domain at `opset` (IR version ORT 1.32 loads)."""
    g = oh.make_graph(nodes, "qdq", inputs, outputs, inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = 10
    onnx.checker.check_model(m, full_check=True)
    return m


def qdq_table_model(
    act: str = "Sigmoid",
    *,
    in_type: str = "int8",
    x_scale: float = 0.05,
    x_zp: int = 0,
    y_scale: float = 1 / 256,
    y_zp: int | None = -128,
    out_type: str = "int8",
    scale_type: str = "float32",
    opset: int = 21,
    dq_attrs: dict | None = None,
    q_attrs: dict | None = None,
    shape: tuple[int, ...] = (256,),
) -> onnx.ModelProto:
    """`x -> DequantizeLinear -> act -> QuantizeLinear -> y` (node names dq, act, q).

    `y_zp=None` leaves QuantizeLinear without a zero point: its output type then comes
    from `q_attrs["output_dtype"]` (default uint8), as `out_type` must say.
    """
    st = {"float32": TP.FLOAT, "float16": TP.FLOAT16, "bfloat16": TP.BFLOAT16}[scale_type]
    inits = [
        oh.make_tensor("xs", st, [], [x_scale]),
        nh.from_array(np.array(x_zp, dtype=in_type), "xz"),
        oh.make_tensor("ys", st, [], [y_scale]),
    ]
    q_in = ["g", "ys"]
    if y_zp is not None:
        inits.append(nh.from_array(np.array(y_zp, dtype=out_type), "yz"))
        q_in.append("yz")
    nodes = [
        oh.make_node("DequantizeLinear", ["x", "xs", "xz"], ["f"], name="dq", **(dq_attrs or {})),
        oh.make_node(act, ["f"], ["g"], name="act"),
        oh.make_node("QuantizeLinear", q_in, ["y"], name="q", **(q_attrs or {})),
    ]
    out_tp = INT_TP.get(out_type, TP.UNDEFINED)
    if q_attrs and "output_dtype" in q_attrs and y_zp is None:
        out_tp = q_attrs["output_dtype"]
    return finish(
        nodes,
        [oh.make_tensor_value_info("x", INT_TP[in_type], list(shape))],
        [oh.make_tensor_value_info("y", out_tp, list(shape))],
        inits,
        opset,
    )


def ort_outputs(
    m: onnx.ModelProto | Path, feeds: dict, level: str = "off"
) -> dict[str, np.ndarray]:
    """ONNX Runtime CPU at optimisation level `off` or `all` (its default): outputs by name."""
    so = ort.SessionOptions()
    so.graph_optimization_level = {
        "off": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[level]
    so.log_severity_level = 3
    data = m.SerializeToString() if isinstance(m, onnx.ModelProto) else str(m)
    s = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(names, feeds), strict=True))


def ort_run(m: onnx.ModelProto | Path, feeds: dict, level: str = "off") -> list[np.ndarray]:
    """ONNX Runtime CPU at optimisation level `off` or `all` (its default)."""
    return list(ort_outputs(m, feeds, level).values())


def check_end_to_end(
    m: onnx.ModelProto,
    feeds: dict,
    tmp: Path,
    verdict: str | None = None,
    args: tuple = ("--reference", "ort-host"),
) -> dict[str, np.ndarray]:
    """`prover check`, `npuc compile`, `npuc run` on `m`; asserts the program equals ORT.

    `verdict` (e.g. "REFUTED"): the check must report it (exit 1 for REFUTED), else exit 0.
    `args`: extra options of `prover check` and `npuc compile`; by default the reference is
    this host's ORT (what the outputs are compared with).
    Returns the program's outputs.
    """
    path, prog, inp, out = tmp / "m.onnx", tmp / "m.npuprog", tmp / "in.npz", tmp / "out.npz"
    onnx.save(m, path)
    r = prover("check", path, "--proofs-mode", "off", "--no-progress", *args)
    assert r.returncode == (1 if verdict == "REFUTED" else 0), (r.stdout, r.stderr)
    assert verdict is None or verdict in r.stdout, r.stdout
    r = npuc("compile", path, "-o", prog, "--proofs-mode", "off", "--no-progress", *args)
    assert r.returncode == 0, (r.stdout, r.stderr)
    np.savez(inp, **feeds)
    r = npuc("run", prog, "--input", inp, "-o", out)
    assert r.returncode == 0, (r.stdout, r.stderr)
    got = dict(np.load(out))
    for ref, o in zip(ort_run(m, feeds), m.graph.output, strict=True):
        assert got[o.name].dtype == ref.dtype, (got[o.name].dtype, ref.dtype)
        np.testing.assert_array_equal(got[o.name], ref)
    return got
