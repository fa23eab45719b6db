"""`npuc run` support: execute a program file on inputs from an .npz, write outputs to an .npz.

A program compiled from a model with a symbolic batch dimension (`Program.dynamic_batch`)
holds one row; the frontend showed rows independent (`compiler.batch`), so a batch of B
rows runs in one wide pass (or, where that is not known exact, as B one-row runs whose
outputs are stacked along axis 0). Inputs whose shapes
do not fit (other dimensions, different batch sizes) are a `ProgramError`.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import BinaryIO

import numpy as np

from .program import Program, ProgramError
from .simulator import Counters, SimulatorError, run


def load_inputs(path: str | Path) -> dict[str, np.ndarray]:
    """Arrays of an .npz keyed by graph input name (clear `ProgramError` on a bad file)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise ProgramError(f"cannot read inputs {str(path)!r}: {e}") from None


def save_arrays(file: str | Path | BinaryIO, arrays: Mapping[str, np.ndarray]) -> None:
    """Write `arrays` as an .npz keyed by name (as `np.savez`, which would take an array
    named "allow_pickle" for its flag and drop it, and fail on one named "file")."""
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, arr in arrays.items():
            with z.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(arr), allow_pickle=False)


def batch_size(program: Program, inputs: dict[str, np.ndarray]) -> int | None:
    """The number of rows of a dynamic-batch program's inputs (None: a static program).

    Raises `ProgramError` when a batched input has other dimensions than compiled, or
    the batched inputs disagree on the number of rows.
    """
    if not program.dynamic_batch:
        return None
    specs = {s.name: s for s in program.inputs}
    sizes = {}
    for name in program.dynamic_batch:
        if name not in inputs or name not in specs:
            continue  # a missing input is reported by the simulator
        arr, spec = np.asarray(inputs[name]), specs[name]
        if arr.ndim != len(spec.shape) or tuple(arr.shape[1:]) != tuple(spec.shape[1:]):
            want = "x".join(["N", *map(str, spec.shape[1:])])
            raise ProgramError(
                f"input {name!r} has shape {tuple(arr.shape)}, expected {want} (N rows)"
            )
        sizes[name] = int(arr.shape[0])
    if len(set(sizes.values())) > 1:
        raise ProgramError(f"batched inputs have different numbers of rows: {sizes}")
    n = next(iter(sizes.values()), None)
    if n == 0:
        raise ProgramError("the batch has no rows")
    return n


def run_batched(
    program: Program, inputs: dict[str, np.ndarray], *, one_pass: bool = True
) -> tuple[dict[str, np.ndarray], Counters]:
    """Run `program` on inputs of any batch size.

    A dynamic-batch program runs all rows in one wide pass when it can (`one_pass`), else
    row by row; both give the same outputs and counters (see `_one_pass`).
    """
    n = batch_size(program, inputs)
    rows = next((s.shape[0] for s in program.inputs if s.name in program.dynamic_batch), None)
    if n is None or n == rows:
        return run(program, inputs)
    if one_pass and rows == 1:
        got = _one_pass(program, inputs, n)
        if got is not None:
            return got
    return _row_by_row(program, inputs, n)


def _row(program: Program, inputs: dict[str, np.ndarray], r: int) -> dict[str, np.ndarray]:
    return {
        k: (np.asarray(v)[r : r + 1] if k in program.dynamic_batch else v)
        for k, v in inputs.items()
    }


def _one_pass(
    program: Program, inputs: dict[str, np.ndarray], n: int
) -> tuple[dict[str, np.ndarray], Counters] | None:
    """All `n` rows in one simulator pass, or None where that is not known to be exact.

    NPU steps and host kernel terms are elementwise or an exact row-wise integer matmul,
    so they run on all rows at once; host ONNX steps still run once per row inside the
    wide pass (the simulator does that), as their models are compiled for one row and
    ONNX Runtime may pick other float kernels for other row counts. Any failure (shape,
    undefined result) falls back to the row-by-row run, which reports it as before. Counters do not depend on
    the data, so the batch's are the first row's times `n`; the first and last rows'
    one-row outputs double as a check of the wide pass.
    """
    try:
        first, c = run(program, _row(program, inputs, 0))
        last, _ = run(program, _row(program, inputs, n - 1))
        outs, _ = run(program, inputs, rows=n)
    except (SimulatorError, ValueError):  # e.g. a step whose shapes do not widen
        return None
    for o in program.outputs:
        got = np.asarray(outs[o])
        if got.shape[:1] != (n,) or got.dtype != first[o].dtype:
            return None
        if not (np.array_equal(got[:1], first[o]) and np.array_equal(got[-1:], last[o])):
            return None
    total = Counters()
    _add(total, c, times=n)
    return outs, total


def _row_by_row(
    program: Program, inputs: dict[str, np.ndarray], n: int
) -> tuple[dict[str, np.ndarray], Counters]:
    total = Counters()
    parts: dict[str, list[np.ndarray]] = {o: [] for o in program.outputs}
    for r in range(n):
        outs, c = run(program, _row(program, inputs, r))
        _add(total, c)
        for o in program.outputs:
            parts[o].append(outs[o])
    return {o: np.concatenate(parts[o], axis=0) for o in program.outputs}, total


def _add(total: Counters, c: Counters, times: int = 1) -> None:
    """Add `times` copies of `c` into `total`."""
    for f in fields(Counters):
        a, b = getattr(total, f.name), getattr(c, f.name)
        if isinstance(a, dict):
            for k, v in b.items():
                a[k] = a.get(k, 0) + v * times
        else:
            setattr(total, f.name, a + b * times)


def run_file(
    program: str | Path, inputs: str | Path, output: str | Path
) -> tuple[dict[str, np.ndarray], Counters]:
    """Load `program`, run it on the arrays of `inputs`, save outputs (by name) to `output`."""
    prog = Program.load(program)
    outs, counters = run_batched(prog, load_inputs(inputs))
    save_arrays(output, outs)
    return outs, counters
