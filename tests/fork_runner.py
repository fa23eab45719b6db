"""Run many `prover`/`npuc` command lines cheaply: import the tools once, fork per command.

Most of a hostile-model run's CPU time is the interpreter starting and importing numpy,
onnx, onnxruntime and z3 (about 0.35 of 0.45 s per command), paid again by every
`python -m` subprocess. This driver pays it once, then forks one child per command
line: each child is still its own process (own memory limit, own timeout, a crash
cannot take the others down) and runs the same `main(argv)` the console scripts call.

Protocol: a JSON list of jobs on stdin, each {"tool": "prover"|"npuc", "argv": [...],
"memory": bytes, "timeout": seconds}; on stdout a JSON list of {"returncode",
"stdout", "stderr"} in the same order (returncode -N: killed by signal N).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import tempfile
import traceback
from pathlib import Path

MAX_CHILDREN = 2


def _child(job: dict, out: Path, err: Path) -> None:
    """In the forked child: limits, redirected output, the tool's main; never returns."""
    code = 1
    try:
        resource.setrlimit(resource.RLIMIT_AS, (job["memory"], job["memory"]))
        signal.alarm(int(job["timeout"]))
        for fd, path in ((1, out), (2, err)):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(f, fd)
            os.close(f)
        if job["tool"] == "prover":
            from compiler.cli_prover import main
        else:
            from compiler.cli_npuc import main
        try:
            code = int(main(job["argv"]) or 0)
        except SystemExit as e:  # argparse
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:  # noqa: BLE001 - what an uncaught exception does in `python -m`
            traceback.print_exc()
            code = 1
    finally:
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except Exception:  # noqa: BLE001, S110 - exiting anyway
                pass
        os._exit(code)


def preload() -> None:
    """Import, once, what the tools import lazily (every module of the three packages,
    ONNX, ONNX Runtime and the solvers), so that no child pays for it again."""
    import importlib
    import pkgutil

    import compiler
    import npu_backend
    import prover

    for pkg in (prover, npu_backend, compiler):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            importlib.import_module(info.name)
    for name in ("onnx", "onnx.reference", "onnxruntime", "z3", "bitwuzla", "cvc5"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # an optional solver: the child fails as the tool would


def run(jobs: list[dict]) -> list[dict]:
    """Run `jobs` (at most MAX_CHILDREN at once); results in the same order."""
    preload()

    tmp = Path(tempfile.mkdtemp(prefix="fork_runner_"))
    running: dict[int, int] = {}
    codes: dict[int, int] = {}
    pending = list(range(len(jobs)))

    def reap() -> None:
        pid, status = os.wait()
        codes[running.pop(pid)] = (
            -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        )

    while pending or running:
        if pending and len(running) < MAX_CHILDREN:
            i = pending.pop(0)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(jobs[i], tmp / f"{i}.out", tmp / f"{i}.err")
            running[pid] = i
        else:
            reap()
    results = []
    for i in range(len(jobs)):
        out, err = tmp / f"{i}.out", tmp / f"{i}.err"
        results.append(
            {
                "returncode": codes[i],
                "stdout": out.read_text(errors="replace") if out.exists() else "",
                "stderr": err.read_text(errors="replace") if err.exists() else "",
            }
        )
        out.unlink(missing_ok=True)
        err.unlink(missing_ok=True)
    tmp.rmdir()
    return results


if __name__ == "__main__":
    json.dump(run(json.load(sys.stdin)), sys.stdout)
