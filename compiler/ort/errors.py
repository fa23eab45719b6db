"""The exceptions ONNX Runtime raises for a model it cannot load or run.

Catching these (and not `Exception`) where a run of ORT may fail on purpose keeps a bug of
our own, around the run, from passing for ORT's refusal.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def ort_errors() -> tuple[type[BaseException], ...]:
    """Every exception class of ORT's Python binding (`Fail`, `InvalidGraph`,
    `InvalidArgument`, `NotImplemented`, `RuntimeException`, ...: each derives from
    `Exception` directly), and `RuntimeError`, which the binding raises for a C++ error
    of no ORT status."""
    from onnxruntime.capi import onnxruntime_pybind11_state as st

    found = [v for v in vars(st).values() if isinstance(v, type) and issubclass(v, Exception)]
    return (*dict.fromkeys(found), RuntimeError)
