"""Build the small ONNX models shipped in examples/ (deterministic: same bytes every run).

    python examples/make_examples.py            # (re)write every examples/*.onnx
    python examples/make_examples.py --check    # exit 1 if a committed file differs

Every model is int8 QOperator form (QLinearMatMul, com.microsoft QLinearSigmoid),
runs in ONNX Runtime, except matmul_requantize_sigmoid.onnx, which uses the
project's own `ai.npufusion.Requantize` (ONNX has no standalone integer requantize).

Activation parameters are chosen against ONNX Runtime's own QLinearSigmoid table
(`prover.lut.build_ort_sigmoid_table`, which reproduces MLAS): "agreeing" ones give
the same table as the default target's LUT builder (plain float32 sigmoid,
round half to even), so the fusion proves bitwise; the "disagreeing" ones differ
from it in one table entry, at a rounding boundary, so bitwise is refuted and
bounded:1 proves.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
OPSET = 21
MS = "com.microsoft"
NPUF = "ai.npufusion"

# (in_scale, in_zp, out_scale, out_zp) of a QLinearSigmoid; see the module docstring.
SIG_AGREE = (0.05, 0, 1 / 256, -128)
SIG_DISAGREE = (0.0435, 11, 0.0013427734375, -114)  # entry x=-20: ORT 39, float32 builder 40


def _f32(v: float) -> float:
    return float(np.float32(v))


class Builder:
    """Accumulates nodes, initializers and value infos of one graph."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.domains: set[str] = set()

    def const(self, name: str, value, dtype: str) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def input(self, name: str, shape: list[int], elem=TensorProto.INT8) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def output(self, name: str, shape: list[int], elem=TensorProto.INT8) -> None:
        self.outputs.append(helper.make_tensor_value_info(name, elem, shape))

    def node(self, op: str, ins: list[str], outs: list[str], name: str, domain: str = "", **kw):
        if domain:
            self.domains.add(domain)
        self.nodes.append(helper.make_node(op, ins, outs, name=name, domain=domain, **kw))
        return outs[0]

    def qlinear_matmul(
        self, x: str, w: np.ndarray, name: str, x_q=(0.02, 0), w_q=(0.01, 0), y_q=(0.05, 0)
    ) -> str:
        """y = QLinearMatMul(x, W) with int8 everything."""
        p = name
        ins = [
            x,
            self.const(f"{p}_xs", _f32(x_q[0]), "float32"),
            self.const(f"{p}_xz", x_q[1], "int8"),
            self.const(f"{p}_W", w, "int8"),
            self.const(f"{p}_ws", _f32(w_q[0]), "float32"),
            self.const(f"{p}_wz", w_q[1], "int8"),
            self.const(f"{p}_ys", _f32(y_q[0]), "float32"),
            self.const(f"{p}_yz", y_q[1], "int8"),
        ]
        return self.node("QLinearMatMul", ins, [f"{p}_out"], name)

    def qlinear_sigmoid(self, x: str, q: tuple, name: str, out: str | None = None) -> str:
        """com.microsoft QLinearSigmoid with (in_scale, in_zp, out_scale, out_zp) `q`."""
        ins = [
            x,
            self.const(f"{name}_xs", _f32(q[0]), "float32"),
            self.const(f"{name}_xz", q[1], "int8"),
            self.const(f"{name}_ys", _f32(q[2]), "float32"),
            self.const(f"{name}_yz", q[3], "int8"),
        ]
        return self.node("QLinearSigmoid", ins, [out or f"{name}_out"], name, domain=MS)

    def model(self) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.inits)
        opsets = [helper.make_opsetid("", OPSET)]
        opsets += [helper.make_opsetid(d, 1) for d in sorted(self.domains)]
        m = helper.make_model(g, opset_imports=opsets, producer_name="make_examples.py")
        m.ir_version = 10
        return m


def weights(seed: int, k: int, n: int) -> np.ndarray:
    """Deterministic int8 weights in [-127, 127]."""
    return np.random.default_rng(seed).integers(-127, 128, size=(k, n)).astype(np.int8)


def matmul_sigmoid() -> onnx.ModelProto:
    """MatMul -> Sigmoid, directly: fuses and proves bitwise on the default target."""
    b = Builder("matmul_sigmoid")
    x = b.input("X", [1, 16])
    y = b.qlinear_matmul(x, weights(1, 16, 8), "mm", y_q=(SIG_AGREE[0], SIG_AGREE[1]))
    b.qlinear_sigmoid(y, SIG_AGREE, "sig", out="Y")
    b.output("Y", [1, 8])
    return b.model()


def matmul_requantize_sigmoid() -> onnx.ModelProto:
    """MatMulInteger -> ai.npufusion.Requantize (double rounding) -> Sigmoid."""
    b = Builder("matmul_requantize_sigmoid")
    x = b.input("X", [1, 16])
    w = b.const("W", weights(2, 16, 8), "int8")
    acc = b.node("MatMulInteger", [x, w], ["acc"], "mm")
    # real multiplier 0.02*0.01/0.05 = 0.004 = 0.512 * 2^-7 -> M = round(0.512 * 2^31)
    r = b.node(
        "Requantize",
        [acc],
        ["rq"],
        "requant",
        domain=NPUF,
        multiplier=1099511628,
        shift=-7,
        zero_point=0,
        rounding="double",
        output_type="int8",
    )
    b.qlinear_sigmoid(r, SIG_AGREE, "sig", out="Y")
    b.output("Y", [1, 8])
    return b.model()


def matmul_clip_sigmoid() -> onnx.ModelProto:
    """MatMul -> Clip (int8) -> Sigmoid: the clip must be composed into the table, or kept."""
    b = Builder("matmul_clip_sigmoid")
    x = b.input("X", [1, 16])
    y = b.qlinear_matmul(x, weights(3, 16, 8), "mm", y_q=(SIG_AGREE[0], SIG_AGREE[1]))
    lo, hi = b.const("clip_lo", -60, "int8"), b.const("clip_hi", 60, "int8")
    c = b.node("Clip", [y, lo, hi], ["clipped"], "clip")
    b.qlinear_sigmoid(c, SIG_AGREE, "sig", out="Y")
    b.output("Y", [1, 8])
    return b.model()


def multi_user() -> onnx.ModelProto:
    """The MatMul result feeds the Sigmoid and is also a graph output: multiple_users."""
    b = Builder("multi_user")
    x = b.input("X", [1, 16])
    y = b.qlinear_matmul(x, weights(4, 16, 8), "mm", y_q=(SIG_AGREE[0], SIG_AGREE[1]))
    b.qlinear_sigmoid(y, SIG_AGREE, "sig", out="Y")
    b.output("Y", [1, 8])
    b.output(y, [1, 8])
    return b.model()


def double_activation() -> onnx.ModelProto:
    """MatMul -> Sigmoid -> Sigmoid: the second activation must never be dropped."""
    b = Builder("double_activation")
    x = b.input("X", [1, 16])
    y = b.qlinear_matmul(x, weights(5, 16, 8), "mm", y_q=(SIG_AGREE[0], SIG_AGREE[1]))
    s1 = b.qlinear_sigmoid(y, SIG_AGREE, "sig1")
    b.qlinear_sigmoid(s1, (1 / 256, -128, 1 / 256, -128), "sig2", out="Y")
    b.output("Y", [1, 8])
    return b.model()


def layout_transpose() -> onnx.ModelProto:
    """MatMul [4,8] -> Transpose [8,4] -> Sigmoid: a hidden transpose (layout_mismatch)."""
    b = Builder("layout_transpose")
    x = b.input("X", [4, 16])
    y = b.qlinear_matmul(x, weights(6, 16, 8), "mm", y_q=(SIG_AGREE[0], SIG_AGREE[1]))
    t = b.node("Transpose", [y], ["mm_t"], "transpose", perm=[1, 0])
    b.qlinear_sigmoid(t, SIG_AGREE, "sig", out="Y")
    b.output("Y", [8, 4])
    return b.model()


def showcase() -> onnx.ModelProto:
    """Several sites over one input X: proven, refuted (LUT rounding boundary), rejected."""
    b = Builder("showcase")
    x = b.input("X", [1, 16])
    # proven: parameters whose target table equals ONNX Runtime's
    y1 = b.qlinear_matmul(x, weights(11, 16, 8), "mm_ok", y_q=(SIG_AGREE[0], SIG_AGREE[1]))
    b.qlinear_sigmoid(y1, SIG_AGREE, "sig_ok", out="Y_ok")
    b.output("Y_ok", [1, 8])
    # refuted bitwise: one table entry differs from ONNX Runtime's (proves under bounded:1)
    y2 = b.qlinear_matmul(x, weights(12, 16, 8), "mm_lut", y_q=(SIG_DISAGREE[0], SIG_DISAGREE[1]))
    b.qlinear_sigmoid(y2, SIG_DISAGREE, "sig_lut", out="Y_lut")
    b.output("Y_lut", [1, 8])
    # rejected: the MatMul result is also a graph output (multiple_users)
    y3 = b.qlinear_matmul(x, weights(13, 16, 8), "mm_shared", y_q=(SIG_AGREE[0], SIG_AGREE[1]))
    b.qlinear_sigmoid(y3, SIG_AGREE, "sig_shared", out="Y_shared")
    b.output("Y_shared", [1, 8])
    b.output(y3, [1, 8])
    # rejected: a hidden transpose between MatMul and Sigmoid (layout_mismatch)
    x4 = b.input("X4", [4, 16])
    y4 = b.qlinear_matmul(x4, weights(14, 16, 8), "mm_t", y_q=(SIG_AGREE[0], SIG_AGREE[1]))
    t = b.node("Transpose", [y4], ["mm_t_T"], "transpose", perm=[1, 0])
    b.qlinear_sigmoid(t, SIG_AGREE, "sig_t", out="Y_t")
    b.output("Y_t", [8, 4])
    return b.model()


def ort_quantized(fmt: str = "QOperator") -> onnx.ModelProto:
    """A float MatMul -> Sigmoid quantized by onnxruntime.quantization.quantize_static.

    `fmt` "QOperator" gives QLinearMatMul + QLinearSigmoid; "QDQ" gives
    DequantizeLinear/QuantizeLinear around a float MatMul and Sigmoid (the MatMul
    then accumulates in float32 in ONNX Runtime, which no integer epilogue proves).
    """
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    rng = np.random.default_rng(7)
    w = (rng.standard_normal((16, 8)) * 0.25).astype(np.float32)
    b = Builder("float_matmul_sigmoid")
    x = b.input("X", [1, 16], TensorProto.FLOAT)
    y = b.node("MatMul", [x, b.const("W", w, "float32")], ["mm_out"], "mm")
    b.node("Sigmoid", [y], ["Y"], "sig")
    b.output("Y", [1, 8], TensorProto.FLOAT)
    float_model = b.model()
    float_model.opset_import[0].version = 17

    class Reader(CalibrationDataReader):
        """Eight fixed calibration rows (deterministic)."""

        def __init__(self) -> None:
            data = np.random.default_rng(8).uniform(-2.0, 2.0, size=(8, 1, 16))
            self.rows = iter([{"X": r.astype(np.float32)} for r in data])

        def get_next(self):
            return next(self.rows, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "quant.onnx"
        onnx.save(float_model, src)
        quantize_static(
            str(src),
            str(dst),
            Reader(),
            quant_format=getattr(QuantFormat, fmt),
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
            extra_options={"ActivationSymmetric": False, "WeightSymmetric": True},
        )
        return onnx.load(dst)


MODELS = {
    "matmul_sigmoid.onnx": matmul_sigmoid,
    "matmul_requantize_sigmoid.onnx": matmul_requantize_sigmoid,
    "matmul_clip_sigmoid.onnx": matmul_clip_sigmoid,
    "multi_user.onnx": multi_user,
    "double_activation.onnx": double_activation,
    "layout_transpose.onnx": layout_transpose,
    "ort_quantized_matmul_sigmoid.onnx": ort_quantized,
    "ort_quantized_qdq_matmul_sigmoid.onnx": lambda: ort_quantized("QDQ"),
    "showcase.onnx": showcase,
}


def build_all() -> dict[str, bytes]:
    """Serialized bytes of every example model (checked by onnx.checker)."""
    out = {}
    for name, fn in MODELS.items():
        m = fn()
        onnx.checker.check_model(m)
        out[name] = m.SerializeToString()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files")
    ap.add_argument("--out", default=str(HERE), help="output directory (default examples/)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    stale = []
    for name, data in build_all().items():
        p = out / name
        if args.check:
            if not p.exists() or p.read_bytes() != data:
                stale.append(name)
        else:
            p.write_bytes(data)
    if stale:
        print("stale: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
