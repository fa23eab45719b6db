"""`prover check` and `npuc compile` on zoo models against ONNX Runtime, in one run (issue 25).

One command:

    python3 bench/zoo_bench.py                          # examples/zoo/small (+ /tmp/zoo if ready)
    python3 bench/zoo_bench.py /tmp/zoo/full --only 'mobilenet_v2__*' --repeat 3
    python3 bench/zoo_bench.py DIR --json out.json --markdown

For each model (`*.onnx` in each directory, sorted), three fresh child processes, each
measured on its own by `os.wait4` (CPU = user + sys of that child, peak RSS = its
`ru_maxrss`), best of --repeat (smallest CPU; its RSS), the three taken in turn in each
round so that a burst of load on a shared host falls on each of them alike:

- `ort`: `import onnxruntime`, one `InferenceSession` (CPU provider, default level), one
  inference on zeros (symbolic dims set to 1);
- `check`: `python -m compiler.cli.prover check MODEL --proofs-mode off --no-progress
  --format json`;
- `compile`: `python -m compiler.cli.npuc compile MODEL -o PROGRAM --proofs-mode off
  --no-progress` (the program and its ledger).

Both tool runs write their phase totals (`compiler.phases`, environment `NPU_PHASES`):
load, frontend, qdq_reading, legality, prove, lower, report for the check; codegen and
ledger of the compile; `other` is the rest of the child's CPU (interpreter start-up, imports,
rendering the report). Ratios per model: check/ort, compile/check, RSS check/ort and
compile/ort, against issue 25's targets (3x, 2x, 3x); the summary counts the models meeting
each. Bytecode is cached under a private prefix primed by a first run, as an installed
package has it. The commit measured is printed first (with `+dirty` for a changed tree); to
keep working while it runs, run it from a `git archive` copy with `--commit REV`.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "examples" / "zoo" / "small"
FULL = Path("/tmp/zoo")
FULL_READY = FULL / "survey_ready"
PHASES = ("load", "frontend", "qdq_reading", "legality", "prove", "lower", "report")
TARGETS = {"check/ort": 3.0, "compile/check": 2.0, "rss check/ort": 3.0, "rss compile/ort": 3.0}

ORT_RUN = r"""
import sys
import numpy as np
import onnxruntime as ort
so = ort.SessionOptions()
so.log_severity_level = 3
s = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
types = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
         "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(int32)": np.int32,
         "tensor(int64)": np.int64, "tensor(bool)": np.bool_}
feeds = {i.name: np.zeros([d if isinstance(d, int) and d > 0 else 1 for d in i.shape],
                          dtype=types[i.type]) for i in s.get_inputs()}
s.run(None, feeds)
"""


@dataclass
class Run:
    """One child: exit code, CPU seconds (user + sys), peak RSS (MiB), wall seconds."""

    code: int
    cpu_s: float
    rss_mb: float
    wall_s: float
    phases: dict[str, float] = field(default_factory=dict)
    err: str = ""


def measure(argv: list[str], env: dict[str, str], phases_file: Path | None = None) -> Run:
    """Run `argv` (output to temp files) and read its own rusage with `os.wait4`."""
    env = dict(env)
    if phases_file is not None:
        phases_file.unlink(missing_ok=True)
        env["NPU_PHASES"] = str(phases_file)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read().decode(errors="replace").strip().splitlines()
    run = Run(p.returncode, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, wall)
    run.err = tail[-1][:200] if tail else ""
    if phases_file is not None and phases_file.exists():
        run.phases = json.loads(phases_file.read_text())["phases"]
    return run


def best_in_turn(
    children: list[tuple[list[str], Path | None]], env: dict[str, str], repeat: int
) -> list[Run]:
    """Each child's run with the smallest CPU of `repeat`, the children run in turn in each
    round (not one child `repeat` times, then the next)."""
    runs: list[list[Run]] = [[] for _ in children]
    for _ in range(max(1, repeat)):
        for got, (argv, phases_file) in zip(runs, children, strict=True):
            got.append(measure(argv, env, phases_file))
    return [min(got, key=lambda r: r.cpu_s) for got in runs]


def commit() -> str:
    """The commit measured (`+dirty` when tracked files differ from it)."""

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True).stdout

    head = git("rev-parse", "--short", "HEAD").strip() or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no").strip() else "")


def models(dirs: list[Path], only: list[str]) -> list[Path]:
    out = []
    for d in dirs:
        if not d.is_dir():
            sys.exit(f"zoo_bench: not a directory: {d}")
        for m in sorted(d.glob("*.onnx")):
            if not only or any(fnmatch.fnmatch(m.name, pat) for pat in only):
                out.append(m)
    return out


def bench_model(m: Path, env: dict[str, str], tmp: Path, repeat: int, py: str) -> dict:
    ort, check, comp = best_in_turn(
        [
            ([py, "-c", ORT_RUN, str(m)], None),
            ([py, "-m", "compiler.cli.prover", "check", str(m), "--proofs-mode", "off",
              "--no-progress", "--format", "json", "-o", str(tmp / "report.json")],
             tmp / "check.json"),
            ([py, "-m", "compiler.cli.npuc", "compile", str(m), "-o", str(tmp / "program.json"),
              "--proofs-mode", "off", "--no-progress"],
             tmp / "compile.json"),
        ],
        env,
        repeat,
    )  # fmt: skip
    row = {"model": m.name, "ort": ort.__dict__, "check": check.__dict__, "compile": comp.__dict__}
    row["ratios"] = {
        "check/ort": check.cpu_s / ort.cpu_s,
        "compile/check": comp.cpu_s / check.cpu_s,
        "rss check/ort": check.rss_mb / ort.rss_mb,
        "rss compile/ort": comp.rss_mb / ort.rss_mb,
    }
    return row


def _phase_row(r: dict) -> list[float]:
    ph = r["check"]["phases"]
    cp = r["compile"]["phases"]
    vals = [ph.get(k, 0.0) for k in PHASES]
    return [*vals, cp.get("codegen", 0.0), cp.get("ledger", 0.0), r["check"]["cpu_s"] - sum(vals)]


COMPLETE = (0, 1, 3, 7)  # proven / refuted / unknown / float compute: the run went through


def _ok(r: dict) -> bool:
    return r["ort"]["code"] == 0 and all(r[k]["code"] in COMPLETE for k in ("check", "compile"))


def print_tables(rows: list[dict], markdown: bool) -> None:
    head = ["model", "ort s", "check s", "compile s", "check/ort", "compile/check",
            "ort MB", "check MB", "compile MB", "rss check/ort", "rss compile/ort", "exit c/n"]  # fmt: skip
    body = []
    for r in rows:
        q = r["ratios"]
        body.append([
            r["model"].removesuffix(".onnx"), f"{r['ort']['cpu_s']:.2f}", f"{r['check']['cpu_s']:.2f}",
            f"{r['compile']['cpu_s']:.2f}", f"{q['check/ort']:.1f}x", f"{q['compile/check']:.2f}x",
            f"{r['ort']['rss_mb']:.0f}", f"{r['check']['rss_mb']:.0f}", f"{r['compile']['rss_mb']:.0f}",
            f"{q['rss check/ort']:.1f}x", f"{q['rss compile/ort']:.1f}x",
            f"{r['check']['code']}/{r['compile']['code']}",
        ])  # fmt: skip
    _table(head, body, markdown)
    print()
    ph_head = ["model", *PHASES, "codegen", "ledger", "other"]
    _table(
        ph_head,
        [[r["model"].removesuffix(".onnx"), *(f"{v:.2f}" for v in _phase_row(r))] for r in rows],
        markdown,
    )


def _table(head: list[str], body: list[list[str]], markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("| --- | " + " | ".join("---:" for _ in head[1:]) + " |")
        for b in body:
            print("| " + " | ".join(b) + " |")
        return
    w = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    print("  ".join(h.rjust(w[i]) if i else h.ljust(w[i]) for i, h in enumerate(head)))
    for b in body:
        print("  ".join(v.rjust(w[i]) if i else v.ljust(w[i]) for i, v in enumerate(b)))


def summary(rows: list[dict]) -> None:
    done = [r for r in rows if _ok(r)]
    bad = [r for r in rows if not _ok(r)]
    print(f"\nmodels: {len(rows)} measured, {len(bad)} with an error exit (not in the ratios)")
    for r in bad:
        print(f"  {r['model']}: ort {r['ort']['code']} check {r['check']['code']} "
              f"compile {r['compile']['code']}: {r['check']['err'] or r['compile']['err']}")  # fmt: skip
    if not done:
        return
    for name, target in TARGETS.items():
        vals = [r["ratios"][name] for r in done]
        met = sum(v <= target for v in vals)
        worst = max(done, key=lambda r: r["ratios"][name])
        print(f"  {name:<16} target <= {target:.0f}x: met on {met}/{len(done)}; median "
              f"{statistics.median(vals):.2f}x, worst {max(vals):.2f}x ({worst['model']})")  # fmt: skip
    tot = [sum(_phase_row(r)[i] for r in done) for i in range(len(PHASES) + 3)]
    names = [*PHASES, "codegen", "ledger", "other"]
    whole = sum(tot[: len(PHASES)]) + tot[-1]
    print("  check CPU by phase over all models: " + ", ".join(
        f"{n} {v:.1f}s ({v / whole:.0%})" for n, v in zip(names, tot, strict=True)
        if n not in ("codegen", "ledger")))  # fmt: skip
    print(f"  compile only: codegen {tot[-3]:.1f}s, ledger {tot[-2]:.1f}s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", type=Path, help="zoo directories (default: see above)")
    ap.add_argument("--only", nargs="+", default=[], metavar="GLOB", help="model file names")
    ap.add_argument("--repeat", type=int, default=1, help="runs per figure (best CPU)")
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--markdown", action="store_true", help="tables as Markdown")
    ap.add_argument("--commit", help="the label of the tree measured (default: its git HEAD)")
    ap.add_argument(
        "--python",
        default=sys.executable,
        help="interpreter of the children (e.g. a fresh venv's, to measure its packages)",
    )
    args = ap.parse_args()
    label = args.commit or commit()
    dirs = args.dirs or [SMALL, *([FULL] if FULL_READY.exists() else [])]
    ms = models(dirs, args.only)
    if not ms:
        sys.exit("zoo_bench: no model matches")
    print(f"commit {label}, {len(ms)} models from {', '.join(map(str, dirs))}, "
          f"best of {args.repeat}, load average {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pyc")
        env["PYTHONPATH"] = str(ROOT)
        measure([args.python, "-m", "compiler.cli.prover", "check", str(ms[0]),
                 "--proofs-mode", "off", "--no-progress"], env)  # fmt: skip  # bytecode
        for i, m in enumerate(ms):
            rows.append(bench_model(m, env, tmp, args.repeat, args.python))
            r = rows[-1]
            print(f"[{i + 1}/{len(ms)}] {m.name}: ort {r['ort']['cpu_s']:.2f}s check "
                  f"{r['check']['cpu_s']:.2f}s compile {r['compile']['cpu_s']:.2f}s",
                  file=sys.stderr, flush=True)  # fmt: skip
    print_tables(rows, args.markdown)
    summary(rows)
    if args.json:
        args.json.write_text(json.dumps({"commit": label, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
