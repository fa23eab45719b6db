"""Train, convert and quantize the digits MLP: a real model as a user would make one.

    pip install -e ".[examples]"
    python examples/digits/make_digits.py            # writes examples/digits/*.onnx, *.npz
    python examples/digits/make_digits.py --accuracy # only re-measure the committed models
    python examples/digits/make_digits.py --check    # exit 1 if a rebuild differs

scikit-learn's MLPClassifier (64 -> 64 -> 32 -> 10, logistic hidden layers) is trained on
the bundled `load_digits` data (pixels scaled to [0, 1]; 1437 training, 360 test samples,
fixed seeds), converted with skl2onnx (MatMul + Add layers) and, as a second float model,
rewritten into Gemm layers (what a framework's Linear layer exports). Each float model is
quantized with `onnxruntime.quantization.quantize_static`, calibrated on the training
split, in both formats (QOperator, QDQ), per tensor and per channel, with uint8
activations x int8 weights (ORT's default) and int8 x int8:

    digits_{matmul,gemm}_float.onnx
    digits_{matmul,gemm}_{qop,qdq}_{u8s8,s8s8}_{pt,pc}.onnx

`digits_test.npz` holds the 360 test inputs (float32, keyed by the graph input name) and
their labels (`labels`). The script prints every model's accuracy under ONNX Runtime.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

HERE = Path(__file__).resolve().parent
INPUT = "input"
SEED = 0
N_TEST = 360


def _need(module: str):
    try:
        return __import__(module)
    except ImportError:
        sys.exit(f"error: {module} is not installed; run: pip install -e '.[examples]'")


def load_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, x_test, y_train, y_test): pixels / 16 as float32, a stratified fixed split."""
    _need("sklearn")
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    return train_test_split(
        x, d.target.astype(np.int64), test_size=N_TEST, random_state=SEED, stratify=d.target
    )


def train(x: np.ndarray, y: np.ndarray):
    """The MLP: 64 -> 64 -> 32 -> 10 with logistic hidden layers."""
    from sklearn.neural_network import MLPClassifier

    clf = MLPClassifier(
        hidden_layer_sizes=(64, 32), activation="logistic", max_iter=1000, random_state=SEED
    )
    return clf.fit(x, y)


def to_onnx(clf) -> onnx.ModelProto:
    """skl2onnx conversion: probabilities as a plain tensor (no ZipMap)."""
    _need("skl2onnx")
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType

    m = convert_sklearn(
        clf,
        initial_types=[(INPUT, FloatTensorType([None, 64]))],
        options={id(clf): {"zipmap": False}},
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    m.graph.name = "digits_mlp"  # skl2onnx writes a random one: keep the files reproducible
    return m


def matmul_add_to_gemm(model: onnx.ModelProto) -> onnx.ModelProto:
    """Rewrite every MatMul(x, W) -> Add(., b) with constant W [K, N], b [N] or [1, N] into Gemm."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    users: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    out_names = {o.name for o in g.output}
    new_nodes, dropped = [], set()
    for n in g.node:
        if id(n) in dropped:
            continue
        if n.op_type == "MatMul" and n.input[1] in inits and n.output[0] not in out_names:
            u = users.get(n.output[0], [])
            if len(u) == 1 and u[0].op_type == "Add":
                add = u[0]
                bias = [i for i in add.input if i != n.output[0]]
                if len(bias) == 1 and bias[0] in inits:
                    b = numpy_helper.to_array(inits[bias[0]])
                    w = numpy_helper.to_array(inits[n.input[1]])
                    if b.size == w.shape[1] and b.shape in ((w.shape[1],), (1, w.shape[1])):
                        # a Linear layer's bias is 1-D [N] (skl2onnx writes [1, N])
                        inits[bias[0]].CopyFrom(numpy_helper.from_array(b.reshape(-1), bias[0]))
                        new_nodes.append(
                            helper.make_node(
                                "Gemm",
                                [n.input[0], n.input[1], bias[0]],
                                [add.output[0]],
                                name=(n.name or "matmul") + "_gemm",
                            )
                        )
                        dropped.add(id(add))
                        continue
        new_nodes.append(n)
    del g.node[:]
    g.node.extend(new_nodes)
    onnx.checker.check_model(m)
    return m


VARIANTS = [
    (fmt, types, gran)
    for fmt in ("qop", "qdq")
    for types in ("u8s8", "s8s8")
    for gran in ("pt", "pc")
]


def quantize(float_path: Path, out_path: Path, x_cal: np.ndarray, fmt, types, gran) -> None:
    """`quantize_static` with a CalibrationDataReader over the training split."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._rows = iter(x_cal[i : i + 1] for i in range(len(x_cal)))

        def get_next(self):
            row = next(self._rows, None)
            return None if row is None else {INPUT: row}

    quantize_static(
        str(float_path),
        str(out_path),
        Reader(),
        quant_format=QuantFormat.QOperator if fmt == "qop" else QuantFormat.QDQ,
        per_channel=gran == "pc",
        activation_type=QuantType.QUInt8 if types == "u8s8" else QuantType.QInt8,
        weight_type=QuantType.QInt8,
    )


def predict(path: Path, x: np.ndarray, optimized: bool = True) -> np.ndarray:
    """Predicted labels of `path` under ONNX Runtime (default optimisations, or none)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if not optimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    label_name = s.get_outputs()[0].name
    return np.asarray(s.run([label_name], {INPUT: x})[0]).ravel()


def model_paths() -> list[Path]:
    return [
        HERE / f"digits_{kind}_{suffix}.onnx"
        for kind in ("matmul", "gemm")
        for suffix in ["float"] + [f"{f}_{t}_{g}" for f, t, g in VARIANTS]
    ]


def report(x_test: np.ndarray, y_test: np.ndarray) -> None:
    """Accuracy on the test split under ORT (default optimisations and none), and how many
    predictions differ from the float model's."""
    ref = predict(HERE / "digits_matmul_float.onnx", x_test)
    print(f"{'model':34s} {'ORT default':>11s} {'ORT no-opt':>11s} {'!= float':>9s}")
    for p in model_paths():
        y_def, y_off = predict(p, x_test), predict(p, x_test, optimized=False)
        acc_def, acc_off = (y_def == y_test).mean(), (y_off == y_test).mean()
        print(f"{p.name:34s} {acc_def:11.4f} {acc_off:11.4f} {int((y_def != ref).sum()):9d}")


def build(out: Path) -> None:
    """Train, convert and quantize into `out` (every file `model_paths` names, and the npz)."""
    x_train, x_test, y_train, y_test = load_split()
    clf = train(x_train, y_train)
    print(f"scikit-learn test accuracy: {clf.score(x_test, y_test):.4f}")
    np.savez(out / "digits_test.npz", **{INPUT: x_test, "labels": y_test})
    float_models = {"matmul": to_onnx(clf)}
    float_models["gemm"] = matmul_add_to_gemm(float_models["matmul"])
    with tempfile.TemporaryDirectory() as tmp:
        for kind, m in float_models.items():
            onnx.save(m, out / f"digits_{kind}_float.onnx")
            # quantize_static's shape inference works on a copy, never the written file
            src = Path(tmp) / f"digits_{kind}_float.onnx"
            onnx.save(m, src)
            for fmt, types, gran in VARIANTS:
                dst = out / f"digits_{kind}_{fmt}_{types}_{gran}.onnx"
                quantize(src, dst, x_train, fmt, types, gran)


def check() -> int:
    """Rebuild in a temporary directory; 1 if a committed file differs (versions matter)."""
    stale = []
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp))
        for p in [*model_paths(), HERE / "digits_test.npz"]:
            if not p.exists() or p.read_bytes() != (Path(tmp) / p.name).read_bytes():
                stale.append(p.name)
    for name in stale:
        print(f"stale: {name}", file=sys.stderr)
    return 1 if stale else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--accuracy", action="store_true", help="only measure the committed models")
    mode.add_argument(
        "--check", action="store_true", help="exit 1 if a rebuild differs from the committed files"
    )
    args = ap.parse_args(argv)
    if args.check:
        return check()
    if not args.accuracy:
        build(HERE)
    data = np.load(HERE / "digits_test.npz")
    report(data[INPUT], data["labels"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
