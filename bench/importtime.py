"""Start-up cost of the `prover` CLI: what it imports, and the CPU of `--version` and a 1-site check.

One command:

    python3 bench/importtime.py              # best of 3 of each command
    python3 bench/importtime.py --repeat 5 --top 25

1. `python -X importtime -c "import <cli module>"` (the module is `compiler.cli.prover`, or
   `compiler.cli_prover` before the compiler's sub-package move) and the same for a 1-site
   `prover check examples/matmul_sigmoid.onnx --proofs-mode off`: the top imports by
   cumulative time, and whether the solver modules (z3, cvc5, bitwuzla) were imported.
2. `prover --version` and the 1-site check as child processes: best of --repeat, CPU seconds
   (user + sys of the child) and wall. Twice: with bytecode cached (a private
   PYTHONPYCACHEPREFIX, filled by a first run, as an installed package has it), and with
   bytecode writing off (PYTHONDONTWRITEBYTECODE=1, where every project module is compiled
   from source on each start).

Nothing is written to the work tree (no proof store, no __pycache__).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

from child_time import ChildRun, repeat_child, run_child

ROOT = Path(__file__).resolve().parent.parent
MODEL = "examples/matmul_sigmoid.onnx"
SOLVERS = ("z3", "cvc5", "bitwuzla")
TARGET_CPU_S = 0.5


def cli_module() -> str:
    """The prover CLI's module path (after or before the compiler's sub-package move)."""
    sys.path.insert(0, str(ROOT))
    try:
        for name in ("compiler.cli.prover", "compiler.cli_prover"):
            try:
                if importlib.util.find_spec(name) is not None:
                    return name
            except ModuleNotFoundError:
                continue
    finally:
        sys.path.remove(str(ROOT))
    sys.exit("cannot find the prover CLI module (compiler.cli.prover or compiler.cli_prover)")


def _env(pycache: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPYCACHEPREFIX", None)
    if pycache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def _run(argv: list[str], env: dict[str, str]) -> ChildRun:
    """`argv` run in the repository with `env` (text output), timed."""
    return run_child(argv, cwd=ROOT, env=env, text=True)


def best_of(argv: list[str], env: dict[str, str], repeat: int) -> tuple[float, float]:
    """Best (smallest) CPU and wall seconds of `repeat` runs."""
    runs = repeat_child(argv, repeat, cwd=ROOT, env=env, text=True)
    return min(r.cpu_s for r in runs), min(r.wall_s for r in runs)


def parse_importtime(stderr: str) -> list[tuple[int, int, int, str]]:
    """(self us, cumulative us, depth, module) per line of `-X importtime` output."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        parts = line[len("import time:") :].split("|")
        self_us, cum_us, name = int(parts[0]), int(parts[1]), parts[2]
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        rows.append((self_us, cum_us, depth, name.strip()))
    return rows


def report_imports(title: str, rows: list[tuple[int, int, int, str]], top: int) -> None:
    total = sum(cum for _, cum, depth, _ in rows if depth == 0)
    loaded = {name for *_, name in rows}
    print(f"\n{title}: {len(rows)} modules, {total / 1000:.0f} ms of imports")
    print(
        "  solver modules imported: "
        + (", ".join(s for s in SOLVERS if s in loaded) or "none (z3, cvc5, bitwuzla all lazy)")
    )
    print(f"  {'cumulative ms':>13} {'self ms':>8}  module (indent = imported by the one above)")
    for self_us, cum, depth, name in sorted(rows, key=lambda r: -r[1])[:top]:
        print(f"  {cum / 1000:>13.1f} {self_us / 1000:>8.1f}  {'  ' * depth}{name}")
    by_pkg: dict[str, int] = {}
    for self_us, _, _, name in rows:
        pkg = name.split(".")[0]
        by_pkg[pkg] = by_pkg.get(pkg, 0) + self_us
    heavy = sorted(by_pkg.items(), key=lambda kv: -kv[1])[:10]
    print(
        "  self time by top-level package: " + ", ".join(f"{k} {v / 1000:.0f} ms" for k, v in heavy)
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command (best of)")
    ap.add_argument("--top", type=int, default=20, help="imports listed by cumulative time")
    args = ap.parse_args()
    mod = cli_module()
    py = sys.executable
    version = [py, "-m", mod, "--version"]
    check = [py, "-m", mod, "check", MODEL, "--proofs-mode", "off"]
    print(f"CLI module: {mod}; Python {sys.version.split()[0]}; model {MODEL}")
    with tempfile.TemporaryDirectory() as pycache:
        cached = _env(pycache)
        _run(check, cached)  # fills the private bytecode cache
        _run(version, cached)
        rows = parse_importtime(
            _run([py, "-X", "importtime", "-c", f"import {mod}"], cached).proc.stderr
        )
        report_imports(f"import {mod}", rows, args.top)
        rows = parse_importtime(_run([py, "-X", "importtime", *check[1:]], cached).proc.stderr)
        report_imports("prover check, 1 site, --proofs-mode off", rows, args.top)
        figures = {"cached": cached, "off": _env(None)}
        print(f"\nbest of {args.repeat}, child CPU (user+sys) and wall seconds:")
        print(f"  {'command':<34} {'bytecode':<10} {'CPU s':>7} {'wall s':>7}  target")
        for env in figures.values():
            short = "cached" if env is cached else "off"
            for name, argv in (("prover --version", version), ("prover check (1 site)", check)):
                cpu, wall = best_of(argv, env, max(1, args.repeat))
                ok = "ok" if cpu < TARGET_CPU_S else f"over {TARGET_CPU_S} s"
                print(f"  {name:<34} {short:<10} {cpu:>7.3f} {wall:>7.3f}  {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
