"""`prover check` and `npuc compile` share their model and run options (one definition in
`compiler.cli.common`): the same flags parse to the same values in both."""

from __future__ import annotations

import pytest

from compiler.cli import npuc, prover

SHARED = [
    "--policy",
    "bounded:2",
    "--target",
    "npu_fixed",
    "--no-synthesize",
    "--schedule-strategy",
    "late",
    "--indent",
    "2",
    "--proofs-mode",
    "off",
    "--timeout",
    "3.5",
    "--no-progress",
    "--debug",
]
NAMES = (
    "model policy target synthesize schedule_strategy indent proofs_mode timeout no_progress debug"
)


def _shared(ns) -> dict:
    return {k: str(getattr(ns, k)) for k in NAMES.split()}


def test_both_tools_parse_the_shared_options_alike():
    a = prover.build_parser().parse_args(["check", "m.onnx", *SHARED])
    b = npuc.build_parser().parse_args(["compile", "m.onnx", "-o", "p.npz", *SHARED])
    assert _shared(a) == _shared(b)
    assert a.timeout == 3.5 and a.indent == 2 and a.synthesize is False
    d1 = prover.build_parser().parse_args(["check", "m.onnx"])
    d2 = npuc.build_parser().parse_args(["compile", "m.onnx", "-o", "p.npz"])
    assert _shared(d1) == _shared(d2)


@pytest.mark.parametrize("bad", [["--timeout", "0"], ["--indent", "-1"], ["--policy", "nope"]])
def test_both_tools_reject_the_same_bad_values(bad, capsys):
    for argv in (["check", "m.onnx", *bad], ["compile", "m.onnx", "-o", "p.npz", *bad]):
        parser = prover.build_parser() if argv[0] == "check" else npuc.build_parser()
        with pytest.raises(SystemExit) as e:
            parser.parse_args(argv)
        assert e.value.code == 2
