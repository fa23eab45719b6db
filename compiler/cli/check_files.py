"""`python -m compiler.cli.check_files [CHECK OPTIONS] MODEL.onnx ...`: `prover check` per model.

The pre-commit hook (`.pre-commit-hooks.yaml`) runs this: pre-commit appends the changed
files after the hook's `args`, so the trailing `*.onnx` arguments are the models and
everything before them is passed to each `prover check` unchanged. Every model is checked
(a failing one does not stop the others) and the exit code is the worst of theirs, in the
zoo gate's order: 6 worse than a baseline, then 1, 2, 5, 7, 3; 0 when all pass.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

PROG = "prover-check-files"


def split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(options, models): the models are the trailing arguments ending in `.onnx`."""
    k = len(argv)
    while k > 0 and argv[k - 1].lower().endswith(".onnx"):
        k -= 1
    return list(argv[:k]), list(argv[k:])


def worst(codes: Sequence[int]) -> int:
    """The exit code over several checks (`compiler.zoo.report.PRECEDENCE`, after 6)."""
    from compiler.report.model import ExitCode
    from compiler.zoo.report import PRECEDENCE

    for c in (ExitCode.WORSE, *PRECEDENCE):
        if int(c) in codes:
            return int(c)
    failed = sorted(c for c in codes if c != 0)
    return failed[0] if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Check each model; returns the worst exit code."""
    from compiler.cli.prover import main as prover

    opts, models = split(sys.argv[1:] if argv is None else argv)
    if not models:
        if any(a in ("-h", "--help") for a in opts):
            print(__doc__)
            return 0
        print(f"{PROG}: no .onnx models given (nothing to check)", file=sys.stderr)
        return 0
    codes = []
    for model in models:
        sys.stdout.flush()
        codes.append(prover(["check", model, *opts]))
    bad = [f"{m} (exit {c})" for m, c in zip(models, codes, strict=True) if c]
    if bad:
        print(
            f"{PROG}: {len(bad)} of {len(models)} models failed: {', '.join(bad)}", file=sys.stderr
        )
    return worst(codes)


if __name__ == "__main__":
    sys.exit(main())
