"""`npuc inputs`: the `IN.npz` a model's program expects (names, shapes, dtypes).

A skeleton holds zeros of the right name, shape and dtype for every graph input;
symbolic dimensions take the sizes the user gives (`--batch` for a leading one,
`--dim NAME=SIZE` for a named one). With float data (`--from FLOAT.npz`, keyed by
input name) the file holds that data instead: a float input takes it as float32; an
8-bit input is quantized with the model's own parameters for it (the scale and zero
point of the DequantizeLinear / QLinear ops that read it), by ONNX Runtime's
QuantizeLinear itself, so the values are exactly what a quantizer in front of the
model would produce. Readers that disagree on those parameters are refused (no one
quantization is the model's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from compiler.errors import FrontendError

from .overridable import constant_initializers, overridable_initializers

# ops reading an 8-bit activation: (operand, its scale, its zero point) input positions
_QPARAMS: dict[str, tuple[tuple[int, int, int], ...]] = {
    "DequantizeLinear": ((0, 1, 2),),
    "QLinearMatMul": ((0, 1, 2), (3, 4, 5)),
    "QLinearConv": ((0, 1, 2), (3, 4, 5)),
    "QLinearAdd": ((0, 1, 2), (3, 4, 5)),
    "QLinearMul": ((0, 1, 2), (3, 4, 5)),
    "QLinearSigmoid": ((0, 1, 2),),
    "QLinearLeakyRelu": ((0, 1, 2),),
    "QLinearSoftmax": ((0, 1, 2),),
    "QGemm": ((0, 1, 2), (3, 4, 5)),
}


@dataclass(frozen=True)
class InputSpec:
    """One graph input: name, numpy dtype, shape (symbolic dims resolved), symbolic dims;
    `default`: an overridable initializer's value (`compiler.frontend.overridable`)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    symbolic: tuple[str, ...]
    default: np.ndarray | None = field(default=None, compare=False)


def input_specs(
    m: onnx.ModelProto, batch: int | None = None, dims: dict[str, int] | None = None
) -> list[InputSpec]:
    """The graph inputs (constant initializers excluded) with symbolic dims resolved.

    A symbolic leading dim takes `batch` (default 1); another symbolic dim must be named
    in `dims`, else `FrontendError` says which. An overridable initializer is an input
    (the program takes it at run time) whose spec carries its default value.
    """
    dims = dict(dims or {})
    inits = {i.name for i in constant_initializers(m)}
    over = overridable_initializers(m)
    defaults = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer if i.name in over}
    out = []
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or tt.elem_type == TensorProto.UNDEFINED:
            raise FrontendError(f"input '{vi.name}' is not a tensor of a known type")
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type).name
        shape, symbolic = [], []
        for k, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                shape.append(int(d.dim_value))
                continue
            label = d.dim_param or f"{vi.name}[{k}]"
            symbolic.append(label)
            if label in dims:
                shape.append(int(dims[label]))
            elif k == 0:
                shape.append(1 if batch is None else int(batch))
            else:
                raise FrontendError(
                    f"input '{vi.name}' dimension {k} ('{label}') is symbolic: give its size "
                    f"with --dim {label}=SIZE"
                )
        if any(s < 1 for s in shape):
            raise FrontendError(f"input '{vi.name}' shape {shape}: sizes must be at least 1")
        out.append(InputSpec(vi.name, dtype, tuple(shape), tuple(symbolic), defaults.get(vi.name)))
    return out


def skeleton(specs: list[InputSpec]) -> dict[str, np.ndarray]:
    """Zeros of each input's shape and dtype."""
    return {s.name: np.zeros(s.shape, dtype=s.dtype) for s in specs}


def input_qparams(m: onnx.ModelProto, name: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(scale, zero point) the model itself uses for 8-bit input `name`: those of the ops
    reading it with constant per-tensor parameters. `FrontendError` if there is none, or
    if two of them read it with different parameters (no one quantization is the
    model's: the error names both readers)."""
    found = _readers(m, name)
    if not found:
        raise FrontendError(
            f"input '{name}' is 8-bit but no op reading it has a constant per-tensor scale "
            "and zero point; quantize the data yourself"
        )
    first, scale, zp = found[0]
    for other, s2, z2 in found[1:]:
        if s2 != scale or _zp(z2) != _zp(zp):
            raise FrontendError(
                f"input '{name}' is read with different quantization parameters by {first} "
                f"(scale {float(scale):.9g}, zero point {_zp(zp)}) and {other} (scale "
                f"{float(s2):.9g}, zero point {_zp(z2)}): no one quantization fits both; "
                "quantize the data yourself"
            )
    return scale, zp


def _zp(zp: np.ndarray | None) -> int:
    return 0 if zp is None else int(zp)


def _readers(m: onnx.ModelProto, name: str) -> list[tuple[str, np.ndarray, np.ndarray | None]]:
    """(node label, scale, zero point) of every op reading `name` with constant per-tensor
    quantization parameters, in graph order."""
    inits = {i.name: numpy_helper.to_array(i) for i in constant_initializers(m)}
    out = []
    for n in m.graph.node:
        for xi, si, zi in _QPARAMS.get(n.op_type, ()):
            if len(n.input) <= si or n.input[xi] != name:
                continue
            scale = inits.get(n.input[si])
            zp = inits.get(n.input[zi]) if len(n.input) > zi and n.input[zi] else None
            if scale is None or scale.size != 1 or (zp is not None and zp.size != 1):
                continue
            label = f"'{n.name}' ({n.op_type})" if n.name else f"a {n.op_type}"
            out.append((label, scale.reshape(()), None if zp is None else zp.reshape(())))
    return out


def quantize(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, dtype: str) -> np.ndarray:
    """ONNX Runtime's QuantizeLinear of float32 `x` (the reference, not a re-derivation)."""
    from compiler.ort.tables import session

    zp_arr = np.zeros((), dtype=dtype) if zp is None else np.asarray(zp, dtype=dtype)
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    g = helper.make_graph(
        [node],
        "quantize_input",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(zp_arr.dtype), None)],
        [
            numpy_helper.from_array(np.asarray(scale, dtype=np.float32), "s"),
            numpy_helper.from_array(zp_arr, "z"),
        ],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    sess = session(model)
    return np.asarray(sess.run(None, {"x": np.asarray(x, dtype=np.float32)})[0])


def from_float(
    m: onnx.ModelProto, specs: list[InputSpec], data: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], list[str]]:
    """The inputs built from float `data` keyed by input name, and one note per input."""
    out, notes = {}, []
    for s in specs:
        if s.name not in data and s.default is not None:
            if tuple(s.default.shape) != s.shape:
                raise FrontendError(
                    f"the float data has no array '{s.name}' and its default value has shape "
                    f"{list(s.default.shape)}, not {list(s.shape)}"
                )
            out[s.name] = np.asarray(s.default, dtype=s.dtype)
            notes.append(f"{s.name}: {s.dtype} {list(s.shape)} the model's default value")
            continue
        if s.name not in data:
            raise FrontendError(f"the float data has no array '{s.name}' (keys: {sorted(data)})")
        x = np.asarray(data[s.name])
        want = np.dtype("object" if s.dtype == "string" else s.dtype)
        taken = x.dtype == want or (s.dtype == "string" and x.dtype.kind in "OU")
        if not taken and x.dtype.kind != "f":
            raise FrontendError(
                f"array '{s.name}' has dtype {x.dtype.name}; give float data or {s.dtype}"
            )
        if tuple(x.shape) != s.shape:
            raise FrontendError(
                f"array '{s.name}' has shape {list(x.shape)}; the model expects {list(s.shape)}"
                + (f" (symbolic: {', '.join(s.symbolic)})" if s.symbolic else "")
            )
        if taken and x.dtype.kind != "f":  # token ids, masks, text: taken as they are
            out[s.name] = x.astype(want) if s.dtype == "string" else x
            notes.append(f"{s.name}: {s.dtype} {list(x.shape)} as given")
        elif want.kind == "f":
            out[s.name] = x.astype(s.dtype)
            notes.append(f"{s.name}: {s.dtype} {list(x.shape)} (the model quantizes it itself)")
        elif s.dtype in ("uint8", "int8"):
            scale, zp = input_qparams(m, s.name)
            out[s.name] = quantize(x, scale, zp, s.dtype).astype(s.dtype)
            z = 0 if zp is None else int(zp)
            notes.append(
                f"{s.name}: {s.dtype} {list(x.shape)} quantized with the model's scale "
                f"{float(scale):.9g} and zero point {z}"
            )
        else:
            raise FrontendError(f"input '{s.name}' of type {s.dtype}: give it in that type")
    return out, notes
