"""CLI start-up stays light: `prover --version` imports no numpy, solvers or ONNX."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("numpy", "z3", "cvc5", "bitwuzla", "onnx", "onnxruntime", "matplotlib")


def _loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return eval(p.stdout.strip().splitlines()[-1])  # a list literal printed by the probe


def test_version_imports_nothing_heavy():
    code = "from compiler.cli.prover import main\nassert main(['--version']) == 0"
    assert _loaded_after(code) == []


def test_version_output_matches_argparse():
    fast = subprocess.run(
        [sys.executable, "-m", "compiler.cli.prover", "--version"], capture_output=True, text=True
    )
    slow = subprocess.run(  # through the parser (a second argument disables the shortcut)
        [sys.executable, "-m", "compiler.cli.prover", "--version", "check"],
        capture_output=True,
        text=True,
    )
    assert fast.returncode == slow.returncode == 0
    assert fast.stdout == slow.stdout and fast.stdout.startswith("prover ")


def test_a_check_imports_no_code_generator(tmp_path):
    """`prover check` generates no program: it imports neither codegen nor the instruction
    set, program file or simulator (about 20 ms of start-up); `npuc compile` does."""
    from pathlib import Path

    model = Path(__file__).resolve().parent.parent / "examples" / "matmul_sigmoid.onnx"
    gen = ("npu_backend.codegen", "npu_backend.isa", "npu_backend.program", "npu_backend.simulator")
    runs = {
        "check": f"from compiler.cli.prover import main\nmain(['check', {str(model)!r}])",
        "compile": "from compiler.cli.npuc import main\n"
        f"main(['compile', {str(model)!r}, '-o', {str(tmp_path / 'p.npuprog')!r}])",
    }
    loaded = {}
    for cmd, code in runs.items():
        probe = f"import sys\n{code}\nprint(sorted(m for m in {gen!r} if m in sys.modules))"
        p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        loaded[cmd] = eval(p.stdout.strip().splitlines()[-1])
    assert loaded == {"check": [], "compile": sorted(gen)}
