"""`npuc run` support: execute a program file on inputs from an .npz, write outputs to an .npz."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from .program import Program, ProgramError
from .simulator import Counters, run


def load_inputs(path: str | Path) -> dict[str, np.ndarray]:
    """Arrays of an .npz keyed by graph input name (clear `ProgramError` on a bad file)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise ProgramError(f"cannot read inputs {str(path)!r}: {e}") from None


def run_file(
    program: str | Path, inputs: str | Path, output: str | Path
) -> tuple[dict[str, np.ndarray], Counters]:
    """Load `program`, run it on the arrays of `inputs`, save outputs (by name) to `output`."""
    prog = Program.load(program)
    outs, counters = run(prog, load_inputs(inputs))
    with open(output, "wb") as f:
        np.savez(f, **outs)
    return outs, counters
