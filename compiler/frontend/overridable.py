"""Initializers a caller may override at run time, as ONNX Runtime reads a model.

From IR version 4 on, an initializer that is also listed in `graph.input` is only a
default: ONNX Runtime accepts a feed of that name, does not constant-fold it and its
optimisers do not treat it as constant (`Graph::CanOverrideInitializer` is
`ir_version >= 4`; `Graph::GetConstantInitializer` returns nothing for an initializer
listed among the graph inputs). Below IR version 4 every initializer had to be listed as
an input, and ONNX Runtime treats all of them as constants (a feed of that name is
rejected as an invalid input name). The frontend follows the same rule: an overridable
initializer is a run-time graph input, never a constant.
"""

from __future__ import annotations

import onnx

OVERRIDABLE_SINCE_IR = 4


def overridable_initializers(m: onnx.ModelProto) -> frozenset[str]:
    """Names of the initializers of `m`'s main graph that a caller may override."""
    if m.ir_version < OVERRIDABLE_SINCE_IR:
        return frozenset()
    listed = {vi.name for vi in m.graph.input}
    return frozenset(i.name for i in m.graph.initializer if i.name in listed)


def constant_initializers(m: onnx.ModelProto) -> list[onnx.TensorProto]:
    """The initializers of `m`'s main graph that are constants (not overridable)."""
    over = overridable_initializers(m)
    return [i for i in m.graph.initializer if i.name not in over]


def overridable_message(name: str, ir_version: int) -> str:
    """Why `name` is no constant, and how to make it one."""
    return (
        f"initializer '{name}' is overridable at run time: it is listed in graph.input of "
        f"an IR version {ir_version} model (>= {OVERRIDABLE_SINCE_IR}), so ONNX Runtime "
        f"treats it as an input with a default value, not a constant; to make it a constant, "
        f"remove it from graph.input (e.g. export with keep_initializers_as_inputs=False)"
    )
