"""The session options of every ONNX Runtime session the compiler makes itself.

The compiler's sessions (constant folding and host output types in `tables.session`, the
region check, the graph ORT runs at a level) share them: a graph optimisation level by name,
the tool's log severity (`npu_backend.ort_logging`), and idle intra-op threads that block
instead of spinning. A check keeps dozens of sessions alive; with more than about ten, the
idle workers of ORT's default options spun a core for the rest of the process (0.78-1.0 s
of CPU per idle second with 32 alive: `bench/idle_sessions.py`). Only the idle wait
changes: the thread count, and so how ORT splits a tensor into chunks, is the caller's.
"""

from __future__ import annotations

from typing import Any


def session_level(level: str) -> str:
    """The level a session for reference `level` runs at: ORT's default session rewrites
    ("default"); any other reference runs the model's own nodes ("off")."""
    return "default" if level == "default" else "off"


def session_options(level: str, threads: int = 0) -> Any:
    """`onnxruntime.SessionOptions` at optimisation `level` ("default": ORT_ENABLE_ALL,
    "extended": ORT_ENABLE_EXTENDED, anything else: ORT_DISABLE_ALL) with `threads`
    intra-op threads (0: ORT's default count), quiet logs and no idle spinning."""
    from npu_backend.ort_logging import onnxruntime_module, ort_log_severity

    ort = onnxruntime_module()
    levels = {
        "default": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    }
    so = ort.SessionOptions()
    so.graph_optimization_level = levels.get(level, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.intra_op_num_threads = threads
    so.log_severity_level = ort_log_severity()
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so
