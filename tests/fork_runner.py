"""Run the command-line tools cheaply: import them once, fork one process per command.

Most of a short `python -m compiler.cli.prover ...` run's CPU time is the interpreter
starting and importing numpy, onnx, onnxruntime and z3 (about 0.35 of 0.45 s), paid
again by every subprocess a test starts. This driver pays it once, then forks one
child per command line: each child is still its own process (own working directory,
environment, memory limit and timeout; a crash cannot take the others down) and runs
the module as `python -m` does (`runpy`, `__main__`, `sys.argv`), stdin from /dev/null.

Batch mode (stdin: a JSON list of jobs; stdout: a JSON list of results, same order)
or, with `--serve`, one JSON job per input line and one JSON result per output line.
A job is {"module": "compiler.cli.prover", "argv": [...], "cwd"?, "env"?, "memory"?,
"timeout"?}; a result is {"returncode", "stdout", "stderr", "cpu"} (returncode -N: killed
by signal N, e.g. -14 when the timeout's SIGALRM fired; cpu: the child's CPU seconds).
"""

from __future__ import annotations

import json
import os
import resource
import runpy
import signal
import sys
import tempfile
import traceback
from pathlib import Path

MAX_CHILDREN = 2  # batch mode: the machines this runs on have 2 cores


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
            try:
                importlib.import_module(info.name)
            except ImportError:
                pass  # an optional extra (e.g. matplotlib): the child fails as the tool would
    for name in ("onnx", "onnx.reference", "onnxruntime", "z3", "bitwuzla", "cvc5"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def _child(job: dict, out: Path, err: Path) -> None:
    """In the forked child: set up the process, run the module as __main__; never returns."""
    code = 1
    try:
        if job.get("memory"):
            resource.setrlimit(resource.RLIMIT_AS, (job["memory"], job["memory"]))
        if job.get("timeout"):
            signal.alarm(max(1, int(job["timeout"])))
        if job.get("cwd"):
            os.chdir(job["cwd"])
        if job.get("env") is not None:
            os.environ.clear()
            os.environ.update(job["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for fd, path in ((1, out), (2, err)):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(f, fd)
            os.close(f)
        sys.argv = [job["module"], *job["argv"]]
        sys.modules.pop(job["module"], None)  # run afresh as __main__, as `python -m` does
        try:
            runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, int | None):
                print(e.code, file=sys.stderr)
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


def run(jobs: list[dict], max_children: int = MAX_CHILDREN) -> list[dict]:
    """Run `jobs` (at most `max_children` at once); results in the same order."""
    tmp = Path(tempfile.mkdtemp(prefix="fork_runner_"))
    running: dict[int, int] = {}
    codes: dict[int, int] = {}
    cpu: dict[int, float] = {}
    pending = list(range(len(jobs)))
    while pending or running:
        if pending and len(running) < max_children:
            i = pending.pop(0)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(jobs[i], tmp / f"{i}.out", tmp / f"{i}.err")
            running[pid] = i
        else:
            pid, status, usage = os.wait4(-1, 0)
            i = running.pop(pid)
            codes[i] = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            cpu[i] = usage.ru_utime + usage.ru_stime
    results = []
    for i in range(len(jobs)):
        out, err = tmp / f"{i}.out", tmp / f"{i}.err"
        results.append(
            {
                "returncode": codes[i],
                "cpu": cpu[i],
                "stdout": out.read_text(errors="replace") if out.exists() else "",
                "stderr": err.read_text(errors="replace") if err.exists() else "",
            }
        )
        out.unlink(missing_ok=True)
        err.unlink(missing_ok=True)
    tmp.rmdir()
    return results


def serve() -> None:
    """One job per stdin line, one result per stdout line, until stdin closes.

    The first result's "cpu" also counts the driver's own start (its imports)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    start = own.ru_utime + own.ru_stime
    for line in sys.stdin:
        if line.strip():
            r = run([json.loads(line)], 1)[0]
            r["cpu"] += start
            start = 0.0
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    # `python tests/fork_runner.py` puts tests/ first on sys.path, not the checkout: without
    # this the packages came from wherever they are installed (another checkout's
    # editable install), not the code under test, unlike `python -m` run from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    preload()
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        json.dump(run(json.load(sys.stdin)), sys.stdout)
