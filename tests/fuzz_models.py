"""Malformed and hostile ONNX files for fuzzing the command-line front door.

`hostile_cases(dir)` writes every case into `dir` and returns them; each is a file
(or a directory) that `prover check` and `npuc compile` must reject with exit code
2 and a one-line error. `byte_flips(dir, n, seed)` writes random byte flips of a
valid model: those may or may not still be valid models, so the tools must either
reject them (exit 2) or decide them (0, 1, 3), never crash (4 or a traceback).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import models
import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh


@dataclass(frozen=True)
class Case:
    """One fuzz input: `path` fed as MODEL; `why` says what is wrong with it."""

    name: str
    path: Path
    why: str


def valid_model() -> onnx.ModelProto:
    """The base model every structural mutation starts from (QLinearMatMul -> QLinearSigmoid)."""
    return models.matmul_activation(K=8, N=4, M=2)


def _copy() -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(valid_model())
    return m


def _node(m: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in m.graph.node if n.name == name)


def _init(m: onnx.ModelProto, name: str) -> onnx.TensorProto:
    return next(t for t in m.graph.initializer if t.name == name)


def _set_init(m: onnx.ModelProto, name: str, value: np.ndarray) -> None:
    _init(m, name).CopyFrom(nh.from_array(value, name))


def _cycle() -> onnx.ModelProto:
    m = _copy()
    mm = _node(m, "mm")
    mm.input[0] = "y"  # the matmul reads the activation's output: a cycle through both
    return m


def _missing_input() -> onnx.ModelProto:
    m = _copy()
    _node(m, "act").input[0] = "nowhere"
    return m


def _huge_shape() -> onnx.ModelProto:
    m = _copy()
    d = m.graph.input[0].type.tensor_type.shape.dim
    d[0].dim_value = 1 << 40
    m.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 1 << 40
    return m


def _huge_weights_shape() -> onnx.ModelProto:
    m = _copy()
    w = _init(m, "W")
    w.dims[0] = 1 << 31  # declared [2^31, N] but only K*N bytes of data
    return m


def _float_weights() -> onnx.ModelProto:
    m = _copy()
    _set_init(m, "W", np.ones((8, 4), np.float32))
    return m


def _float_input() -> onnx.ModelProto:
    m = _copy()
    m.graph.input[0].type.tensor_type.elem_type = TP.FLOAT
    return m


def _string_input() -> onnx.ModelProto:
    m = _copy()
    m.graph.input[0].type.tensor_type.elem_type = TP.STRING
    return m


def _scale(value: float) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        m = _copy()
        _set_init(m, "y_s", np.asarray(value, np.float32))
        return m

    return build


def _weights_scale_nan() -> onnx.ModelProto:
    m = _copy()
    _set_init(m, "w_s", np.asarray(np.nan, np.float32))
    return m


def _requantize(**attrs) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        kw = dict(multiplier=1 << 30, shift=-7, zero_point=0, rounding="double")
        kw.update(attrs)
        return models.matmul_activation(K=8, N=4, M=2, form="integer", requantize=kw)

    return build


def _showcase_huge() -> onnx.ModelProto:
    """The showcase model (one refuted site) with its batch dimension declared 2^40."""
    m = onnx.load(str(Path(__file__).resolve().parents[1] / "examples" / "showcase.onnx"))
    for vi in [m.graph.input[0], *m.graph.output[:4]]:
        vi.type.tensor_type.shape.dim[0].dim_value = 1 << 40
    return m


def _transpose_perm() -> onnx.ModelProto:
    m = models.matmul_activation(K=8, N=4, M=2, transpose=[1, 0])
    del _node(m, "transpose").attribute[:]
    _node(m, "transpose").attribute.append(oh.make_attribute("perm", [5, 9]))
    return m


def _reshape_absurd() -> onnx.ModelProto:
    m = models.matmul_activation(K=8, N=4, M=2, reshape="noop")
    _set_init(m, "shape", np.asarray([-7, 3], np.int64))
    return m


def _zero_nodes() -> onnx.ModelProto:
    x = oh.make_tensor_value_info("x", TP.INT8, [2, 8])
    g = oh.make_graph([], "empty", [x], [x])
    return oh.make_model(g, opset_imports=models.OPSETS)


def _no_graph() -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.ir_version = 8
    m.opset_import.extend(models.OPSETS)
    return m


def _zero_dim() -> onnx.ModelProto:
    m = _copy()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 0
    m.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 0
    return m


def _future_ir() -> onnx.ModelProto:
    m = _copy()
    m.ir_version = 99
    return m


def _no_ms_opset() -> onnx.ModelProto:
    m = _copy()
    keep = [o for o in m.opset_import if o.domain != "com.microsoft"]
    del m.opset_import[:]
    m.opset_import.extend(keep)
    return m


def _unknown_op() -> onnx.ModelProto:
    m = _copy()
    _node(m, "act").op_type = "QLinearFrobnicate"
    return m


def _duplicate_output() -> onnx.ModelProto:
    m = _copy()
    _node(m, "act").output[0] = "mm_out"  # two producers of one value
    return m


def _wrong_arity() -> onnx.ModelProto:
    m = _copy()
    del _node(m, "mm").input[5:]
    return m


def _non_utf8(data: bytes) -> bytes:
    """The serialized model with the node name `act` replaced by invalid UTF-8 bytes."""
    needle = b"\x12\x03act"  # NodeProto.name (field 3) would be b"\x1a"; try both encodings
    for tag in (b"\x1a", b"\x12"):
        key = tag + b"\x03act"
        if key in data:
            return data.replace(key, tag + b"\x03\xff\xfe\xfd", 1)
    raise AssertionError(f"node name not found in the serialized model ({needle!r})")


BUILDERS: dict[str, tuple[Callable[[], onnx.ModelProto], str]] = {
    "cycle": (_cycle, "the matmul reads the activation's output"),
    "missing_input": (_missing_input, "a node input nothing produces"),
    "huge_input_shape": (_huge_shape, "input declared [2^40, K]"),
    "huge_input_shape_refuted": (_showcase_huge, "[2^40, K] input on a model with a refuted site"),
    "huge_weights_shape": (_huge_weights_shape, "initializer declared [2^31, N], little data"),
    "float_weights": (_float_weights, "QLinearMatMul with float32 weights"),
    "float_input": (_float_input, "QLinearMatMul with a float32 activation input"),
    "string_input": (_string_input, "a string-typed graph input"),
    "scale_zero": (_scale(0.0), "output scale 0"),
    "scale_negative": (_scale(-0.05), "negative output scale"),
    "scale_nan": (_scale(float("nan")), "NaN output scale"),
    "scale_inf": (_scale(float("inf")), "infinite output scale"),
    "weights_scale_nan": (_weights_scale_nan, "NaN weight scale"),
    "requantize_shift_1000": (_requantize(shift=1000), "Requantize shift 1000"),
    "requantize_negative_multiplier": (_requantize(multiplier=-5), "negative multiplier"),
    "requantize_multiplier_2p31": (_requantize(multiplier=1 << 31), "multiplier 2^31"),
    "requantize_bad_rounding": (_requantize(rounding="banana"), "unknown rounding mode"),
    "requantize_zp_out_of_range": (_requantize(zero_point=1000), "zero point 1000 for int8"),
    "transpose_perm_out_of_range": (_transpose_perm, "Transpose perm [5, 9] of a 2-D tensor"),
    "reshape_absurd": (_reshape_absurd, "Reshape to [-7, 3]"),
    "zero_nodes": (_zero_nodes, "a graph with no nodes"),
    "no_graph": (_no_graph, "a ModelProto without a graph"),
    "zero_dim": (_zero_dim, "input with a zero-sized dimension"),
    "future_ir_version": (_future_ir, "ir_version 99"),
    "missing_opset": (_no_ms_opset, "com.microsoft ops without their opset import"),
    "unknown_op": (_unknown_op, "an op type nobody defines"),
    "duplicate_producer": (_duplicate_output, "two nodes write one value"),
    "wrong_arity": (_wrong_arity, "QLinearMatMul with 5 inputs"),
}


def hostile_cases(d: Path) -> list[Case]:
    """Write every hostile case into `d` (created) and return them."""
    d.mkdir(parents=True, exist_ok=True)
    good = valid_model().SerializeToString()
    raw: dict[str, tuple[bytes, str]] = {
        "empty_file": (b"", "zero bytes"),
        "text_file": (b"this is not an onnx model\n", "plain text"),
        "non_utf8_name": (_non_utf8(good), "a node name that is not UTF-8"),
        "garbage": (
            bytes(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8)),
            "random bytes",
        ),
    }
    # A byte flip (seed 1, 2 flips, copy 14) that makes onnx.checker raise UnicodeDecodeError.
    flip = flipped(good, 15, seed=1, flips=2)[14]
    raw["flip_checker_utf8"] = (bytes(flip), "a byte flip the ONNX checker cannot decode")
    for frac in (0.1, 0.5, 0.9, 0.99):
        raw[f"truncated_{int(frac * 100)}"] = (
            good[: int(len(good) * frac)],
            f"first {frac:.0%} of a model",
        )
    out = []
    for name, (data, why) in raw.items():
        p = d / f"{name}.onnx"
        p.write_bytes(data)
        out.append(Case(name, p, why))
    for name, (build, why) in BUILDERS.items():
        p = d / f"{name}.onnx"
        p.write_bytes(build().SerializeToString())
        out.append(Case(name, p, why))
    folder = d / "a_directory.onnx"
    folder.mkdir(exist_ok=True)
    out.append(Case("directory", folder, "a directory instead of a file"))
    out.append(Case("missing_file", d / "does_not_exist.onnx", "no such file"))
    return out


def flipped(good: bytes, n: int, seed: int = 0, flips: int = 3) -> list[bytes]:
    """`n` copies of `good`, each with `flips` random bytes replaced (seeded)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        b = bytearray(good)
        for pos in rng.integers(0, len(b), size=flips):
            b[int(pos)] = int(rng.integers(0, 256))
        out.append(bytes(b))
    return out


def byte_flips(d: Path, n: int, seed: int = 0, flips: int = 3) -> list[Case]:
    """`n` copies of the valid model, each with `flips` random bytes replaced (seeded)."""
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for i, data in enumerate(flipped(valid_model().SerializeToString(), n, seed, flips)):
        p = d / f"flip_{seed}_{i}.onnx"
        p.write_bytes(data)
        out.append(Case(p.stem, p, f"{flips} random bytes of a valid model replaced"))
    return out
