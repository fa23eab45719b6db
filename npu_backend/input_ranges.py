"""The values a program's inputs may legally hold, for the inputs the ledger makes up.

An integer input that indexes a table on the host (a Gather's indices: token ids into an
embedding) is legal only in [0, rows of the gathered axis); ONNX Runtime refuses any other
value. Every other integer input may hold its type's whole range.
"""

from __future__ import annotations

from collections.abc import Iterable

from .lowered import HostOnnx, Step

# ops whose input 1 indexes input 0 along the `axis` attribute (default 0)
INDEXING_OPS = ("Gather", "GatherElements")


def _dims(model, name: str) -> tuple[int, ...] | None:
    """Static shape of `name` in a host step's model (an initializer or a graph input)."""
    for t in model.graph.initializer:
        if t.name == name:
            return tuple(int(d) for d in t.dims)
    for vi in [*model.graph.input, *model.graph.value_info]:
        if vi.name == name:
            dims = vi.type.tensor_type.shape.dim
            if all(d.HasField("dim_value") for d in dims):
                return tuple(int(d.dim_value) for d in dims)
    return None


def index_ranges(steps: Iterable[Step], inputs: Iterable[str]) -> dict[str, tuple[int, int]]:
    """For each of `inputs` a host step gathers with: the half-open range [0, n) of values
    every such use accepts (n: the smallest gathered dimension)."""
    import onnx  # lazy: only programs with host ONNX steps need it

    wanted = set(inputs)
    out: dict[str, tuple[int, int]] = {}
    for st in steps:
        if not isinstance(st, HostOnnx) or not wanted & set(st.inputs):
            continue
        m = onnx.load_from_string(bytes(st.model))
        for n in m.graph.node:
            if n.op_type not in INDEXING_OPS or (n.domain or "") not in ("", "ai.onnx"):
                continue
            if len(n.input) < 2 or n.input[1] not in wanted:
                continue
            dims = _dims(m, n.input[0])
            if not dims:
                continue
            axis = next((int(a.i) for a in n.attribute if a.name == "axis"), 0)
            size = dims[axis % len(dims)]
            lo, hi = out.get(n.input[1], (0, size))
            out[n.input[1]] = (lo, min(hi, size))
    return out
