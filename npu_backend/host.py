"""Host steps: integer kernel terms (NUMPY domain) and ONNX subgraphs run by ONNX Runtime.

onnxruntime is imported lazily, only when a program contains a HostOnnx step.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from prover.domain import NUMPY
from prover.errors import BadInput
from prover.terms import evaluate

from .lowered import HostKernel, HostOnnx


class HostError(RuntimeError):
    """A host step failed (missing input, ONNX Runtime error, value out of its type)."""


class HostInputError(HostError, BadInput):
    """ONNX Runtime refused the values a host step was given (an index out of its table's
    range, ...): the inputs' fault, not the program's."""


def store(values: Any, dtype: str, what: str) -> np.ndarray:
    """Cast kernel int64 results to the storage dtype, refusing values that do not fit."""
    arr = np.asarray(values)
    dt = np.dtype(dtype)
    if dt.kind in "iu" and arr.size:
        info = np.iinfo(dt)
        if arr.min() < info.min or arr.max() > info.max:
            raise HostError(f"{what}: value outside {dt.name} (range [{arr.min()}, {arr.max()}])")
    return arr.astype(dt)


def run_kernel(step: HostKernel, env: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """out = term(inputs) with the kernel's concrete (numpy) semantics."""
    args = {}
    for name in step.inputs:
        if name not in env:
            raise HostError(f"{step.name}: input {name!r} not available")
        args[name] = np.asarray(env[name]).astype(np.int64)
    shape = np.broadcast_shapes(*(a.shape for a in args.values())) if args else ()
    args = {k: np.broadcast_to(v, shape) for k, v in args.items()}
    val = np.broadcast_to(np.asarray(evaluate(step.term, NUMPY, args)), shape)
    return {step.out: store(val, step.out_dtype, step.name)}


# Sessions by (model, level), least recently used first. A program runs each host step once
# per run, and the ledger runs it twice (fused and unfused): a CNN has ~160 host steps, and
# a cache of 32 cleared when full created every session again in every run. Bounded by
# count and by the models' bytes (a host step can hold weights: an LSTM, a float conv).
_SESSIONS: OrderedDict[tuple[bytes, str], Any] = OrderedDict()
MAX_SESSIONS = 512
MAX_SESSION_BYTES = 128 << 20


def _session(model: bytes, level: str = "off"):
    from .ort_logging import onnxruntime_module, ort_log_severity

    ort = onnxruntime_module()  # lazy: only programs with host ONNX steps need it

    key = (model, level)
    sess = _SESSIONS.get(key)
    if sess is not None:
        _SESSIONS.move_to_end(key)
    else:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = (
            ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            if level == "default"
            else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        )
        opts.intra_op_num_threads = 1
        opts.log_severity_level = ort_log_severity()
        # no arena per session: each kept its high-water mark of intermediate tensors, and a
        # CNN's ~160 host steps' sessions (kept for the ledger's second run) held ~45 MB
        opts.enable_cpu_mem_arena = False
        sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        _SESSIONS[key] = sess
        while len(_SESSIONS) > 1 and (
            len(_SESSIONS) > MAX_SESSIONS or sum(len(m) for m, _ in _SESSIONS) > MAX_SESSION_BYTES
        ):
            _SESSIONS.popitem(last=False)
    return sess


def run_onnx(step: HostOnnx, env: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the ONNX subgraph in ONNX Runtime (CPU, at the step's `ort_level`)."""
    feeds = {}
    for name in step.inputs:
        if name not in env:
            raise HostError(f"{step.name}: input {name!r} not available")
        feeds[name] = np.asarray(env[name])
    try:
        sess = _session(bytes(step.model), step.ort_level)
    except Exception as e:  # onnxruntime raises its own exception classes
        raise HostError(f"{step.name}: ONNX Runtime failed: {str(e).splitlines()[0]}") from None
    try:
        results = sess.run(list(step.outputs), feeds)
    except Exception as e:  # noqa: BLE001 - ORT's run-time refusals
        first = str(e).splitlines()[0]
        if "INVALID_ARGUMENT" in first:  # a value it refuses (ORT's status code 2)
            raise HostInputError(
                f"{step.name}: ONNX Runtime refuses the values it is given: {first}"
            ) from None
        raise HostError(f"{step.name}: ONNX Runtime failed: {first}") from None
    return {name: np.asarray(v) for name, v in zip(step.outputs, results, strict=True)}


def run_host(step: HostKernel | HostOnnx, env: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if isinstance(step, HostKernel):
        return run_kernel(step, env)
    return run_onnx(step, env)
