"""Survey a model zoo: ONNX Runtime, `prover check` and `npuc compile` on every model.

    python3 examples/zoo/survey.py DIR [--jobs 2] [--timeout 600] [--only ARCH...] [--json OUT]
    python3 examples/zoo/survey.py --from-json OUT...   # print the tables of earlier runs

Run it from the repository root: the tools run as `python3 -m compiler.cli.prover` and
`python3 -m compiler.cli.npuc` with this checkout first on PYTHONPATH, so it measures
this checkout's code, never an installed copy. For every model of `DIR/manifest.toml`
(or every `*.onnx` in DIR when there is no manifest):

- ORT: an `InferenceSession` (default options) is created and run once on valid random
  inputs (`ok`, or the error's first line);
- `prover check MODEL --policy bitwise --proofs-mode off --format json` and
  `npuc compile MODEL -o PROGRAM --report R.json --proofs-mode off`, each a fresh process
  with a timeout: exit code, the first line of stderr that is not an ONNX Runtime log
  line (and how many such log lines came first), the summary counts, the CPU seconds of
  the process (peak RSS is not recorded: a child's ru_maxrss starts at its parent's, here
  the survey's own, across fork and exec);
- if the compile succeeded, the share of the model's conv/matmul MACs that the program
  runs on the NPU (macs.py: the report does not give MACs), the MACs left on the host and
  the number of host ops the report lists.

Prints a table per model grouped by family, a summary per family, and the distinct
one-line errors with their counts (quoted names and numbers folded, one example each).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(
    1, str(REPO)
)  # this checkout's npu_backend (reads the programs), not an installed one

import manifest  # noqa: E402

ORT_LOG = re.compile(r"^(\x1b\[[0-9;]*m)?\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \[[VIWEF]:onnxruntime")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Run:
    """One tool invocation."""

    rc: int | None = None  # None: timed out
    error: str = ""  # first stderr line that is not an ORT log line
    ort_log_lines: int = 0  # ORT log lines on stderr before it
    cpu_s: float = 0.0
    wall_s: float = 0.0
    summary: dict[str, int] = field(default_factory=dict)


@dataclass
class Result:
    """Everything the survey measured on one model."""

    file: str
    arch: str
    family: str
    variant: str
    ort: str = ""
    macs: int | None = None
    check: Run = field(default_factory=Run)
    compile: Run = field(default_factory=Run)
    npu_macs: int | None = None
    host_macs: int | None = None
    unaccounted: list[str] = field(default_factory=list)
    rejected_reasons: dict[str, int] = field(default_factory=dict)  # prover check, by code
    host_ops: int | None = None
    host_op_codes: dict[str, int] = field(default_factory=dict)
    npu_instructions: dict[str, int] = field(default_factory=dict)

    def macs_balance(self) -> bool:
        """NPU + host MACs of the program equal the model's (True where nothing was compiled)."""
        if self.npu_macs is None or self.host_macs is None or self.macs is None:
            return True
        return self.npu_macs + self.host_macs == self.macs

    @property
    def npu_share(self) -> float | None:
        if self.npu_macs is None or not self.macs:
            return None
        return self.npu_macs / self.macs


def _first_error(stderr: str) -> tuple[str, int]:
    logs = 0
    for line in stderr.splitlines():
        if ORT_LOG.match(line):
            logs += 1
            continue
        if line.strip():
            return ANSI.sub("", line.strip()), logs
    return "", logs


def run_tool(args: list[str], timeout: float) -> tuple[Run, str]:
    """Run `python3 -m ARGS...` from the repository root; (Run, stdout)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(
            [sys.executable, "-m", *args],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
        rc: int | None = None
        ru = None
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                rc = os.waitstatus_to_exitcode(status)
                break
            if time.perf_counter() - t0 > timeout:
                p.kill()
                _, _, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.05)
        p.returncode = rc if rc is not None else -9  # reaped here, not by Popen
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    error, logs = _first_error(stderr)
    run = Run(
        rc=rc,
        error=error if rc is not None else f"timeout after {timeout:.0f} s",
        ort_log_lines=logs,
    )
    run.wall_s = wall
    if ru is not None:
        run.cpu_s = ru.ru_utime + ru.ru_stime
    return run, stdout


def ort_check(path: Path) -> str:
    """'ok' if ONNX Runtime (default session) loads and runs the model once, else the error."""
    import onnxruntime as ort
    from macs import valid_feeds

    try:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        s.run(None, valid_feeds(s))
        return "ok"
    except Exception as exc:  # the survey records what ORT said
        return str(exc).strip().splitlines()[0][:200]


def _summary(report: dict) -> dict[str, int]:
    keys = ("candidates", "proven", "refuted", "unknown", "rejected")
    return {k: int(report.get("summary", {}).get(k, 0)) for k in keys}


def survey_one(entry: manifest.Entry, directory: Path, timeout: float) -> Result:
    """Measure one model."""
    import onnx
    from macs import model_macs, program_macs

    path = (directory / entry.file).resolve()
    r = Result(entry.file, entry.arch, entry.family, entry.variant)
    r.ort = ort_check(path)
    try:
        r.macs = model_macs(onnx.load(str(path)))[0]
    except Exception as exc:
        r.unaccounted.append(f"model MACs: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
    r.check, stdout = run_tool(
        [
            "compiler.cli.prover",
            "check",
            str(path),
            "--policy",
            "bitwise",
            "--proofs-mode",
            "off",
            "--format",
            "json",
            "--no-progress",
        ],
        timeout,
    )
    if r.check.rc in (0, 1, 3):
        try:
            report = json.loads(stdout)
            r.check.summary = _summary(report)
            r.rejected_reasons = dict(
                Counter(
                    (x.get("reason") or {}).get("code", "?")
                    for x in report.get("sites", [])
                    if x.get("verdict") == "rejected"
                )
            )
        except ValueError:
            r.check.error = r.check.error or "stdout is not JSON"
    with tempfile.TemporaryDirectory() as tmp:
        prog, rep = Path(tmp) / "program.npu", Path(tmp) / "report.json"
        r.compile, _ = run_tool(
            [
                "compiler.cli.npuc",
                "compile",
                str(path),
                "-o",
                str(prog),
                "--report",
                str(rep),
                "--proofs-mode",
                "off",
                "--no-progress",
            ],
            timeout,
        )
        if r.compile.rc == 0 and rep.exists():
            report = json.loads(rep.read_text())
            r.compile.summary = _summary(report)
            r.host_ops = len(report.get("host_ops", []))
            r.host_op_codes = dict(Counter(h.get("code", "?") for h in report.get("host_ops", [])))
            counters = report.get("ledger", {}).get("total", {}).get("counters_after", {})
            r.npu_instructions = {
                k.split(".", 1)[1]: v for k, v in counters.items() if k.startswith("by_opcode.")
            }
            try:
                from npu_backend.program import Program

                r.npu_macs, r.host_macs, unknown = program_macs(Program.load(prog))
                r.unaccounted += unknown
            except Exception as exc:
                r.unaccounted.append(
                    f"program MACs: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                )
    return r


def fold(error: str) -> str:
    """An error line with its quoted names and numbers folded, so equal causes group."""
    s = re.sub(r"'[^']*'", "'…'", error)
    s = re.sub(r'"[^"]*"', '"…"', s)
    s = re.sub(r"/tmp/\S+|\S+\.onnx", "PATH", s)
    return re.sub(r"\b\d+(\.\d+)?\b", "N", s)


def _rc(run: Run) -> str:
    return "T/O" if run.rc is None else str(run.rc)


def _counts(run: Run) -> str:
    s = run.summary
    if not s:
        return ""
    return f"{s['candidates']}/{s['proven']}/{s['refuted']}/{s['unknown']}/{s['rejected']}"


def _share(r: Result) -> str:
    v = r.npu_share
    return "" if v is None else f"{v:.2f}"


def tables(results: list[Result]) -> str:
    """Markdown: a summary per family and per architecture, the distinct errors, then one
    row per model."""
    by_family: dict[str, list[Result]] = defaultdict(list)
    for r in sorted(results, key=lambda r: (r.family, r.file)):
        by_family[r.family].append(r)
    by_arch: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for r in sorted(results, key=lambda r: (r.family, r.arch, r.file)):
        by_arch[(r.family, r.arch)].append(r)
    groups = [((f, "all"), rs) for f, rs in by_family.items()] + list(by_arch.items())
    out = [
        "| family | architecture | models | ORT runs | check exit codes | compile exit codes | candidates / proven / refuted / unknown / rejected | NPU MAC share (min–median–max, compiled) | rejected by reason | check CPU s (median) | compile CPU s (median) | models with ORT log lines on stderr |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def hist(rs: list[Run]) -> str:
        c = Counter(_rc(x) for x in rs)
        return ", ".join(f"{k}: {v}" for k, v in sorted(c.items()))

    def med(xs: list[float]) -> float:
        xs = sorted(xs)
        return xs[len(xs) // 2] if xs else float("nan")

    for (fam, arch), rs in groups:
        if arch == "all" and len({r.arch for r in rs}) == 1:
            continue  # a family of one architecture: its row below says it all
        tot: Counter[str] = Counter()
        why: Counter[str] = Counter()
        for r in rs:
            tot.update(r.check.summary)
            why.update(r.rejected_reasons)
        reasons = ", ".join(f"{k}: {v}" for k, v in why.most_common()) or "–"
        shares = sorted(s for r in rs if (s := r.npu_share) is not None)
        sh = f"{shares[0]:.2f}–{med(shares):.2f}–{shares[-1]:.2f}" if shares else "–"
        counts = "/".join(
            str(tot[k]) for k in ("candidates", "proven", "refuted", "unknown", "rejected")
        )
        out.append(
            f"| {fam} | {arch} | {len(rs)} | {sum(r.ort == 'ok' for r in rs)} | {hist([r.check for r in rs])} | "
            f"{hist([r.compile for r in rs])} | {counts} | {sh} | {reasons} | "
            f"{med([r.check.cpu_s for r in rs]):.1f} | {med([r.compile.cpu_s for r in rs]):.1f} | "
            f"{sum(bool(r.check.ort_log_lines or r.compile.ort_log_lines) for r in rs)} |"
        )
    # one row per distinct cause: the tool's name is folded too, so a model that both tools
    # refuse for one reason counts once per tool in the same row
    errors: dict[str, Counter[str]] = defaultdict(Counter)
    example: dict[str, str] = {}
    for r in results:
        if r.ort != "ok":
            errors[fold(r.ort)]["ORT"] += 1
            example.setdefault(fold(r.ort), r.ort)
        for tool, run in (("check", r.check), ("compile", r.compile)):
            if run.rc not in (0, 1, 3) and (run.error or run.rc is None):
                key = fold(re.sub(r"^(prover|npuc): ", "", run.error))
                errors[key][f"{tool} exit {_rc(run)}"] += 1
                example.setdefault(key, run.error)
    out += [
        "",
        "| models | where | error (quoted names and numbers folded; one example) |",
        "|---|---|---|",
    ]
    for key, where in sorted(errors.items(), key=lambda kv: (-max(kv[1].values()), kv[0])):
        ex = example[key].replace("|", "\\|")
        wh = ", ".join(f"{k}: {v}" for k, v in sorted(where.items()))
        out.append(f"| {max(where.values())} | {wh} | {ex} |")
    out += [
        "",
        "| model | ORT | check | cand/prov/ref/unk/rej | compile | NPU MAC share | MACs | host ops | check CPU s | compile CPU s | first error line |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rs in by_family.values():
        for r in rs:
            err = r.check.error if r.check.rc not in (0, 1, 3) else ""
            if not err and r.compile.rc != 0:
                err = r.compile.error
            err = err.replace("|", "\\|")[:140]
            flag = " (?)" if r.unaccounted or not r.macs_balance() else ""
            out.append(
                f"| {r.file[:-5]} | {'ok' if r.ort == 'ok' else 'FAIL'} | {_rc(r.check)} | {_counts(r.check)} | "
                f"{_rc(r.compile)} | {_share(r)}{flag} | {r.macs if r.macs is not None else '?'} | "
                f"{'' if r.host_ops is None else r.host_ops} | {r.check.cpu_s:.1f} | {r.compile.cpu_s:.1f} | {err} |"
            )
    return "\n".join(out)


def _entries(directory: Path) -> list[manifest.Entry]:
    try:
        return manifest.read(directory)
    except FileNotFoundError:
        out = []
        for p in sorted(directory.glob("*.onnx")):
            arch, _, variant = p.stem.partition("__")
            out.append(manifest.Entry(p.name, arch, arch, variant, ""))
        return out


def _load(path: Path) -> list[Result]:
    results = []
    for d in json.loads(path.read_text())["results"]:
        known = set(Run.__dataclass_fields__)
        d["check"] = Run(**{k: v for k, v in d["check"].items() if k in known})
        d["compile"] = Run(**{k: v for k, v in d["compile"].items() if k in known})
        results.append(Result(**d))
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", type=Path, nargs="?", help="zoo directory (build.py --out)")
    ap.add_argument("--jobs", type=int, default=2, help="models surveyed at once (default 2)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per tool run (default 600)")
    ap.add_argument("--only", nargs="+", metavar="ARCH", help="only these architectures")
    ap.add_argument(
        "--json", type=Path, help="write every measurement here (default DIR/survey.json)"
    )
    ap.add_argument(
        "--from-json", type=Path, nargs="+", help="print the tables of earlier runs' JSON (merged)"
    )
    args = ap.parse_args(argv)
    if args.from_json:
        merged = {r.file: r for p in args.from_json for r in _load(p)}  # a later run wins
        print(tables(list(merged.values())))
        return 0
    if args.directory is None or not args.directory.is_dir():
        print("error: give the zoo directory (or --from-json FILE)", file=sys.stderr)
        return 2
    entries = [e for e in _entries(args.directory) if not args.only or e.arch in args.only]
    if not entries:
        print(f"error: no models in {args.directory}", file=sys.stderr)
        return 2
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    results: list[Result] = []
    t0 = time.perf_counter()
    out = args.json or args.directory / "survey.json"

    def save() -> None:  # after every model, so a stopped survey keeps what it measured
        doc = {
            "commit": commit,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "wall_s": round(time.perf_counter() - t0, 1),
            "results": [asdict(r) for r in results],
        }
        out.write_text(json.dumps(doc, indent=1))

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(survey_one, e, args.directory, args.timeout) for e in entries]
        for i, f in enumerate(futures, 1):
            r = f.result()
            results.append(r)
            print(
                f"[{i}/{len(entries)}] {r.file}: ORT {r.ort[:40]}, check {_rc(r.check)} {_counts(r.check)}, "
                f"compile {_rc(r.compile)} share {_share(r) or '-'}  {r.check.error or r.compile.error}"[
                    :240
                ],
                file=sys.stderr,
                flush=True,
            )
            save()
    print(
        f"commit {commit}, {len(results)} models, {time.perf_counter() - t0:.0f} s; JSON in {out}\n"
    )
    print(tables(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
