"""An ONNX model validated once: the ONNX checker, then strict shape inference (types
checked, data propagated). The command-line tools validate a file (to word its errors
before anything else runs) and hand the `CheckedModel` on; `to_ir` does not check it again.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import onnx

from compiler.errors import FrontendError

from .ort_refusals import ort_refusal

# how many models were validated / built into IR in this process (tests count work done once)
COUNTS: Counter[str] = Counter()


@dataclass(frozen=True, eq=False)
class CheckedModel:
    """A validated, shape-inferred model; `proto` must not be modified."""

    proto: onnx.ModelProto


def one_line(e: BaseException) -> str:
    """An ONNX error as one line (at most 400 characters)."""
    lines = [s.strip() for s in str(e).splitlines() if s.strip()]
    return " ".join(lines)[:400] if lines else type(e).__name__


def check_structure(m: onnx.ModelProto | bytes) -> None:
    """The ONNX checker without shape inference (of a model or its serialised bytes);
    raises ONNX's own errors."""
    onnx.checker.check_model(m)


def infer(m: onnx.ModelProto, data: bytes | None = None) -> CheckedModel:
    """`m` (already through `check_structure`) with strictly inferred shapes, types checked
    (what the checker's `full_check` adds), or FrontendError; also a FrontendError for a
    model ONNX Runtime refuses although the checker accepts it (`ort_refusals`). `data`:
    `m` serialised, where the caller has it."""
    try:
        inferred = onnx.shape_inference.infer_shapes(
            m if data is None else data, check_type=True, strict_mode=True, data_prop=True
        )
    except Exception as e:  # noqa: BLE001 - any inference failure is bad input
        raise FrontendError(f"model fails ONNX validation: {one_line(e)}") from None
    why = ort_refusal(inferred)
    if why is not None:
        raise FrontendError(f"model fails ONNX Runtime's validation: {why}")
    COUNTS["validated"] += 1
    return CheckedModel(inferred)


def validate(m: onnx.ModelProto) -> CheckedModel:
    """`check_structure` then `infer`; every failure a FrontendError."""
    try:
        check_structure(m)
    except Exception as e:  # noqa: BLE001
        raise FrontendError(f"model fails ONNX validation: {one_line(e)}") from None
    return infer(m)


def ort_known_only(m: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Nodes of `m` in the ONNX domain whose op ONNX itself does not define: ONNX Runtime's
    own kernels registered there (e.g. SimplifiedLayerNormalization of its layer-norm fusion)."""
    ops = {o.domain or "": o.version for o in m.opset_import}
    return [
        n
        for n in m.graph.node
        if (n.domain or "") in ("", "ai.onnx")
        and not onnx.defs.has(n.op_type, max(ops.get("", 1), 1), "")
    ]


def validate_ort_graph(m: onnx.ModelProto) -> CheckedModel:
    """A graph ONNX Runtime wrote after optimising a validated model (it loaded and ran
    it): `validate` when ONNX knows every op, else shape inference that leaves the outputs
    of ORT's own ONNX-domain kernels to the host's measurement (the ONNX checker rejects
    those ops by name)."""
    if not ort_known_only(m):
        return validate(m)
    try:
        inferred = onnx.shape_inference.infer_shapes(m, check_type=True, data_prop=True)
    except Exception as e:  # noqa: BLE001 - any inference failure is bad input
        raise FrontendError(
            f"ONNX Runtime's optimised graph fails validation: {one_line(e)}"
        ) from None
    COUNTS["validated"] += 1
    return CheckedModel(inferred)
