"""Check your own model: export it to ONNX, quantize it with ONNX Runtime, check every fusion.

    python3 examples/check_your_model.py                    # the shipped float digits MLP
    python3 examples/check_your_model.py --export torch     # a torch model (needs torch)
    python3 examples/check_your_model.py --export sklearn   # a scikit-learn MLP ('examples' extra)
    python3 examples/check_your_model.py --float my.onnx --calibration my_rows.npz -o my_q.onnx

1. Export (only with --export): `torch.onnx.export` or skl2onnx writes a float ONNX model.
   Without --export the float model is `--float` (default: the shipped digits MLP, Gemm layers).
2. Quantize: `onnxruntime.quantization.quantize_static`, calibrated on real rows (the .npz of
   `--calibration`, keyed by the graph input's name, which is read from the model).
3. Check: `prover check` on the quantized model; this script exits with its exit code
   (0: every site decided, none refuted). Replace `export_torch` / `export_sklearn` with your
   own model and `--calibration` with a few hundred rows of your own data.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
DIGITS_FLOAT = HERE / "digits" / "digits_gemm_float.onnx"
DIGITS_ROWS = HERE / "digits" / "digits_test.npz"  # 360 real digits, 64 float features each


def export_torch(path: Path) -> None:
    """Your torch model here: a 64 -> 32 -> 10 MLP with a Sigmoid, exported to `path`."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 32), torch.nn.Sigmoid(), torch.nn.Linear(32, 10)
    ).eval()
    torch.onnx.export(
        model,
        (torch.zeros(1, 64),),
        str(path),
        input_names=["pixels"],
        output_names=["logits"],
        dynamic_axes={"pixels": {0: "batch"}},
        opset_version=17,
        dynamo=False,  # the TorchScript exporter: offline, needs no onnxscript
    )


def export_sklearn(path: Path) -> None:
    """Your scikit-learn model here: an MLP trained on the digits, converted by skl2onnx."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPClassifier

    d = load_digits()
    clf = MLPClassifier(
        hidden_layer_sizes=(32,), activation="logistic", max_iter=300, random_state=0
    )
    clf.fit((d.data / 16.0).astype(np.float32), d.target)
    m = convert_sklearn(
        clf,
        initial_types=[("pixels", FloatTensorType([None, 64]))],
        options={id(clf): {"zipmap": False}},
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    onnx.save(m, str(path))


def input_name(path: Path) -> str:
    """The graph's one real input (initializers listed as inputs are not fed)."""
    g = onnx.load(str(path), load_external_data=False).graph
    consts = {t.name for t in g.initializer}
    names = [i.name for i in g.input if i.name not in consts]
    if len(names) != 1:
        sys.exit(f"error: {path} has inputs {names}; this example feeds models with one input")
    return names[0]


def calibration_rows(npz: Path, name: str) -> np.ndarray:
    """The calibration rows: the array keyed by the input's name, else the file's only array
    (the shipped digits file keys its rows 'input' and also holds 'labels')."""
    with np.load(npz) as data:
        if name in data:
            return data[name].astype(np.float32)
        arrays = [k for k in data if k != "labels"]
        if len(arrays) != 1:
            sys.exit(f"error: {npz} has no array named {name!r} (it has {sorted(data)})")
        return data[arrays[0]].astype(np.float32)


def quantize(float_path: Path, out: Path, rows: np.ndarray, fmt: str, per_channel: bool) -> None:
    """ONNX Runtime's `quantize_static`, one calibration row per call (uint8 activations)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    name = input_name(float_path)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._rows = iter(rows[i : i + 1] for i in range(len(rows)))

        def get_next(self) -> dict[str, np.ndarray] | None:
            row = next(self._rows, None)
            return None if row is None else {name: row}

    quantize_static(
        str(float_path),
        str(out),
        Reader(),
        quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
        per_channel=per_channel,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
    )


def main(argv: list[str] | None = None) -> int:
    """Export (optionally), quantize and check; returns `prover check`'s exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--export", choices=["torch", "sklearn"], help="export this kind of model first")
    p.add_argument("--float", type=Path, default=DIGITS_FLOAT, help="float ONNX model to quantize")
    p.add_argument("--calibration", type=Path, default=DIGITS_ROWS, help=".npz of real input rows")
    p.add_argument("--format", choices=["qdq", "qop"], default="qdq", help="QDQ or QOperator")
    p.add_argument("--per-channel", action="store_true", help="one weight scale per column")
    p.add_argument(
        "-o", "--output", type=Path, default=Path("model_q.onnx"), help="quantized model"
    )
    args = p.parse_args(argv)

    float_path: Path = args.float
    if args.export:
        float_path = args.output.with_name(args.output.stem + "_float.onnx")
        try:
            (export_torch if args.export == "torch" else export_sklearn)(float_path)
        except ImportError as e:
            extra = (
                "pip install torch" if args.export == "torch" else "pip install -e '.[examples]'"
            )
            print(f"error: --export {args.export} needs {e.name} ({extra})", file=sys.stderr)
            return 2
        print(f"1. exported {float_path}")
    rows = calibration_rows(args.calibration, input_name(float_path))
    quantize(float_path, args.output, rows, args.format, args.per_channel)
    print(f"2. quantized {args.output} ({args.format}, calibrated on {len(rows)} rows)")
    print(f"3. prover check {args.output} --policy bitwise", flush=True)
    from compiler.cli.prover import main as prover

    return prover(["check", str(args.output), "--policy", "bitwise"])


if __name__ == "__main__":
    sys.exit(main())
