"""How much of ONNX Runtime's own log reaches stderr: an error is the tool's to word (one
line, its exit code), so by default ORT prints nothing but fatal messages; `--debug` shows
its warnings and errors as it prints them.

Every session the tool creates sets `log_severity_level` from here, and ORT's process-wide
default logger (which some kernels log through) is set once, when onnxruntime is imported
through `onnxruntime_module`.
"""

from __future__ import annotations

from typing import Any

# ORT severities: 0 verbose, 1 info, 2 warning (ORT's default), 3 error, 4 fatal
QUIET = 4
DEBUG = 2
_STATE = {"severity": QUIET, "applied": -1}


def ort_log_severity() -> int:
    """The `log_severity_level` every ONNX Runtime session of the tool uses."""
    return _STATE["severity"]


def show_ort_logs(on: bool = True) -> None:
    """`--debug`: let ONNX Runtime print its warnings and errors again."""
    _STATE["severity"] = DEBUG if on else QUIET
    _STATE["applied"] = -1


def onnxruntime_module() -> Any:
    """`import onnxruntime`, with its default logger at `ort_log_severity()`."""
    import onnxruntime as ort

    if _STATE["applied"] != _STATE["severity"]:
        ort.set_default_logger_severity(_STATE["severity"])
        _STATE["applied"] = _STATE["severity"]
    return ort
