"""Speed of `npuc run` on a batch and of CLI start-up: old path vs new path in one run (issue 15).

One command:

    python3 bench/speed_bench.py            # 5 repeats of each CLI command
    python3 bench/speed_bench.py --repeat 1

1. Batch run: the digits README program (`digits_gemm_qop_s8s8_pc.onnx`, dynamic batch,
   compiled with `npuc compile --proofs-mode off --reference ort-host`) on the 360 test
   digits, row by row (`run_batched(..., one_pass=False)`, the old path) vs one wide pass
   (the new default). CPU time of this process; outputs must be bit-identical to each other
   and to ONNX Runtime on the float model, and counters equal, else the run stops.
2. CLI start-up, as subprocesses (`python -m compiler.cli.prover`, so no launcher shim):
   `prover --version` (answered before the parser) vs `prover --version check` (the same
   output through the full parser, the old path); a 1-site `prover check
   examples/matmul_sigmoid.onnx --proofs-mode off`; and what importing numpy, z3, cvc5,
   bitwuzla, onnxruntime and the report modules eagerly costs (`python -c "import ..."`) vs
   a bare interpreter. Median wall and CPU (user+sys of the child) over --repeat runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from child_time import repeat_child

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "examples" / "digits" / "digits_gemm_qop_s8s8_pc.onnx"
EAGER = "import numpy, z3, cvc5, bitwuzla, onnxruntime, onnx, compiler.report.json_form"


def _npuc(*args: str) -> None:
    p = subprocess.run([sys.executable, "-m", "compiler.cli.npuc", *args], capture_output=True)
    if p.returncode:
        sys.exit(f"npuc {args[0]} failed: {p.stderr.decode().strip()}")


def batch_figures() -> dict[str, float]:
    """CPU seconds of the digits batch row by row and in one pass (checked bit-identical)."""
    import onnxruntime as ort

    from npu_backend.program import Program
    from npu_backend.runner import load_inputs, run_batched

    x = np.load(ROOT / "examples" / "digits" / "digits_test.npz")["input"]
    with tempfile.TemporaryDirectory() as d:
        np.savez(f"{d}/float.npz", input=x)
        _npuc("inputs", str(MODEL), "-o", f"{d}/in.npz", "--from", f"{d}/float.npz")
        _npuc("compile", str(MODEL), "-o", f"{d}/p.npuprog", "--proofs-mode", "off",
              "--reference", "ort-host", "--timeout", "120")  # fmt: skip
        prog, inputs = Program.load(f"{d}/p.npuprog"), load_inputs(f"{d}/in.npz")
    t0 = time.process_time()
    slow, cs = run_batched(prog, inputs, one_pass=False)
    t1 = time.process_time()
    fast, cf = run_batched(prog, inputs)
    t2 = time.process_time()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(MODEL), so, providers=["CPUExecutionProvider"])
    want = dict(
        zip([o.name for o in sess.get_outputs()], sess.run(None, {"input": x}), strict=True)
    )
    for o in prog.outputs:
        if not (np.array_equal(slow[o], fast[o]) and np.array_equal(fast[o], want[o])):
            sys.exit(f"output {o!r} differs between row by row, one pass and ONNX Runtime")
    if cs.to_json() != cf.to_json():
        sys.exit("counters differ between row by row and one pass")
    return {"rows": len(x), "row_by_row_s": t1 - t0, "one_pass_s": t2 - t1}


def _timed(argv: list[str], repeat: int) -> tuple[float, float]:
    """Median wall and child CPU seconds of running `argv` `repeat` times."""
    runs = repeat_child(argv, repeat, cwd=ROOT)
    return statistics.median(r.wall_s for r in runs), statistics.median(r.cpu_s for r in runs)


def cli_figures(repeat: int) -> dict[str, tuple[float, float]]:
    py, cli = sys.executable, [sys.executable, "-m", "compiler.cli.prover"]
    check = ["check", "examples/matmul_sigmoid.onnx", "--proofs-mode", "off"]
    return {
        "python -c pass (bare interpreter)": _timed([py, "-c", "pass"], repeat),
        "python -c 'import <the eager modules>'": _timed([py, "-c", EAGER], repeat),
        "prover --version (new)": _timed([*cli, "--version"], repeat),
        "prover --version check (via the parser)": _timed([*cli, "--version", "check"], repeat),
        "prover check, 1 site, --proofs-mode off": _timed([*cli, *check], repeat),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs of each CLI command (median)")
    args = ap.parse_args()
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    b = batch_figures()
    print(f"batch of {b['rows']} digits, CPU s: row by row {b['row_by_row_s']:.3f}, "
          f"one pass {b['one_pass_s']:.3f}, ratio {b['row_by_row_s'] / b['one_pass_s']:.1f}x "
          "(outputs, counters and ONNX Runtime bit-identical)")  # fmt: skip
    c = cli_figures(max(1, args.repeat))
    print(f"\neager modules: {EAGER}")
    print(f"CLI (median of {max(1, args.repeat)}):      wall s   CPU s")
    for name, (wall, cpu) in c.items():
        print(f"  {name:<52} {wall:7.3f} {cpu:7.3f}")
    new = c["prover --version (new)"]
    old = c["prover --version check (via the parser)"]
    print(f"prover --version: old/new wall {old[0] / new[0]:.1f}x, CPU {old[1] / new[1]:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
