"""`npuc run` support: execute a program file on inputs from an .npz, write outputs to an .npz.

A program compiled from a model with a symbolic batch dimension (`Program.dynamic_batch`)
holds one row; the frontend showed rows independent (`compiler.batch`), so a batch of B
rows runs in one wide pass: NPU steps and host kernel terms are exact row-wise integer
operations, and each host ONNX step runs once on all rows, as ONNX Runtime runs the model
on that batch (its float kernels may round one row differently from many, so B one-row
runs are not ORT on the batch). Inputs whose shapes do not fit (other dimensions,
different batch sizes) are a `ProgramError`.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import BinaryIO

import numpy as np

from .isa import HostCall
from .lowered import HostOnnx
from .program import Program, ProgramError
from .simulator import Counters, SimulatorError, execute, run


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
                a = np.asanyarray(arr)
                if a.dtype.kind == "O":  # ONNX strings (object arrays): written as text
                    a = a.astype(str)
                np.lib.format.write_array(f, a, allow_pickle=False)


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

    A dynamic-batch program runs all rows in one wide pass (`_one_pass`); `one_pass=False`
    runs B one-row runs instead, which give the same outputs and counters only for a
    program without host ONNX steps. Where the wide pass fails, the row-by-row run
    reports the error; if that run succeeds, its outputs are used only for a program
    without host ONNX steps (for one with them it is not what ORT computes on the
    batch: `SimulatorError`).
    """
    n = batch_size(program, inputs)
    rows = next((s.shape[0] for s in program.inputs if s.name in program.dynamic_batch), None)
    if n is None or n == rows:
        return run(program, inputs)
    if not (one_pass and rows == 1):
        return _row_by_row(program, inputs, n)
    got, why = _one_pass(program, inputs, n)
    if got is not None:
        return got
    slow = _row_by_row(program, inputs, n)
    if host_onnx_outputs(program):
        raise SimulatorError(
            f"the batch of {n} rows cannot run in one pass ({why}); its host ONNX steps "
            "run row by row would not be what ONNX Runtime computes on the batch"
        )
    return slow


def host_onnx_outputs(program: Program) -> tuple[str, ...]:
    """The tensors `program`'s host ONNX steps write, in program order."""
    return tuple(
        name
        for ins in program.instructions
        if isinstance(ins, HostCall) and isinstance(ins.step, HostOnnx)
        for name in ins.step.outputs
    )


def _row(program: Program, inputs: dict[str, np.ndarray], r: int) -> dict[str, np.ndarray]:
    return {
        k: (np.asarray(v)[r : r + 1] if k in program.dynamic_batch else v)
        for k, v in inputs.items()
    }


def _host_row(
    program: Program, dram: dict[str, np.ndarray], n: int, r: int
) -> dict[str, np.ndarray]:
    """Row `r` of the host ONNX outputs of a wide pass over `n` rows (whole if not a row)."""
    out = {}
    for name in host_onnx_outputs(program):
        arr = np.asarray(dram[name])
        spec = program.tensors.get(name)
        row = spec is not None and spec.shape[:1] == (1,) and arr.shape[:1] == (n,)
        out[name] = arr[r : r + 1] if row else arr
    return out


def _one_pass(
    program: Program, inputs: dict[str, np.ndarray], n: int
) -> tuple[tuple[dict[str, np.ndarray], Counters] | None, str]:
    """All `n` rows in one simulator pass, or (None, why) where it failed or is not exact.

    The check: the first and last rows run alone, with the wide pass's host ONNX results
    for that row given (`execute`'s `host_results`), must give that row of the wide pass
    exactly; this checks every NPU step and host kernel term (row-independent integer
    operations) while host ONNX steps stay ORT's batch results. Counters do not depend
    on the data, so the batch's are the first row's times `n`.
    """
    try:
        wide = execute(program, inputs, rows=n)
        dram = wide.memory["dram"]
        first, c = run(
            program, _row(program, inputs, 0), host_results=_host_row(program, dram, n, 0)
        )
        last, _ = run(
            program, _row(program, inputs, n - 1), host_results=_host_row(program, dram, n, n - 1)
        )
    except (SimulatorError, ValueError, KeyError) as e:  # e.g. a step whose shapes do not widen
        return None, str(e).splitlines()[0] if str(e) else type(e).__name__
    outs = wide.outputs
    for o in program.outputs:
        got = np.asarray(outs[o])
        if got.shape[:1] != (n,) or got.dtype != first[o].dtype:
            return None, f"output {o!r} is {got.dtype}{list(got.shape)}"
        if not (np.array_equal(got[:1], first[o]) and np.array_equal(got[-1:], last[o])):
            return None, f"output {o!r} differs from its one-row replay"
    total = Counters()
    _add(total, c, times=n)
    return (outs, total), ""


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
