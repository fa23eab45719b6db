"""Element types the frontend reads, and the type combinations ONNX Runtime has kernels for."""

from __future__ import annotations

from onnx import TensorProto

DTYPES: dict[int, str] = {
    TensorProto.INT8: "int8",
    TensorProto.UINT8: "uint8",
    TensorProto.INT16: "int16",
    TensorProto.UINT16: "uint16",
    TensorProto.INT32: "int32",
    TensorProto.INT64: "int64",
    TensorProto.FLOAT: "float32",
}
EIGHT_BIT = ("int8", "uint8")
MAX_ELEMENTS = 1 << 31

# (a, b, y) element types ONNX Runtime 1.32's CPU provider has a QLinearMatMul, QLinearConv
# and QGemm kernel for (measured, tests/test_ort_kernel_types.py); a model using another
# combination cannot run and has no reference meaning.
ORT_QLINEAR_TYPES = (
    ("uint8", "uint8", "uint8"),
    ("uint8", "int8", "uint8"),
    ("int8", "int8", "int8"),
)
# Scale element types a QDQ activation table models exactly (prover.lut.build_ort_qdq_table).
QDQ_SCALE_TYPES: dict[int, str] = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16"}


def type_name(t: int) -> str:
    """ONNX's name of element type `t` (its number when ONNX has none)."""
    try:
        return TensorProto.DataType.Name(int(t))
    except ValueError:
        return str(t)
