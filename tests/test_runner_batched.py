"""`run_batched`: a dynamic-batch program runs all rows in one pass, bit-identical to row by row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cli_helpers import npuc

from npu_backend.program import Program, ProgramError
from npu_backend.runner import _one_pass, load_inputs, run_batched

DIGITS = Path(__file__).resolve().parent.parent / "examples" / "digits"


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The README flow's program (digits_gemm_qop_s8s8_pc, dynamic batch) and its 360 rows."""
    d = tmp_path_factory.mktemp("digits")
    model = DIGITS / "digits_gemm_qop_s8s8_pc.onnx"
    np.savez(d / "float.npz", input=np.load(DIGITS / "digits_test.npz")["input"])
    p = npuc("inputs", str(model), "-o", str(d / "in.npz"), "--from", str(d / "float.npz"))
    assert p.returncode == 0, p.stderr
    p = npuc(
        "compile", str(model), "-o", str(d / "p.npuprog"), "--proofs-mode", "off",
        "--reference", "ort-host", "--timeout", "120",
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    prog = Program.load(d / "p.npuprog")
    assert prog.dynamic_batch
    return prog, load_inputs(d / "in.npz")


def test_one_pass_equals_row_by_row_outputs_and_counters(digits):
    prog, inputs = digits
    n = next(iter(inputs.values())).shape[0]
    assert n == 360
    assert _one_pass(prog, inputs, n) is not None  # the wide pass is taken, not the fallback
    fast, cf = run_batched(prog, inputs)
    slow, cs = run_batched(prog, inputs, one_pass=False)
    assert set(fast) == set(slow) == set(prog.outputs)
    for o in prog.outputs:
        assert fast[o].dtype == slow[o].dtype and fast[o].shape[0] == n
        assert np.array_equal(fast[o], slow[o]), o
    assert cf.to_json() == cs.to_json()


def test_a_corrupted_row_is_caught_and_reported_as_row_by_row(digits):
    prog, inputs = digits
    name = prog.dynamic_batch[0]
    bad = dict(inputs)
    bad[name] = np.asarray(inputs[name])[:5].astype(np.float64)  # not the compiled dtype
    with pytest.raises(Exception) as fast:
        run_batched(prog, bad)
    with pytest.raises(Exception) as slow:
        run_batched(prog, bad, one_pass=False)
    assert type(fast.value) is type(slow.value) and str(fast.value) == str(slow.value)


def test_wrong_row_shape_is_still_a_program_error(digits):
    prog, inputs = digits
    name = prog.dynamic_batch[0]
    with pytest.raises(ProgramError, match="N rows"):
        run_batched(prog, {name: np.asarray(inputs[name])[:, :-1]})
