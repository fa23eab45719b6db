"""`prover check` at model scale: every CLI figure of issue 15 in one run, as ratios.

One command:

    python3 bench/check_bench.py                       # 1/16/256 sites + 2048 columns, best of 3
    python3 bench/check_bench.py --sites 256 --repeat 5 --no-columns
    python3 bench/check_bench.py --baseline 98f1a5e    # also the same runs at that commit

Models: chains of QLinearMatMul -> QLinearSigmoid sites (16x16 int8 weights, one row; every
site proven on the default target), and one QLinearMatMul (K=16, 2048 per-channel weight
scales) -> QLinearSigmoid site on the npu_float target (`pc2048`), built here. Figures are
CPU seconds (user+sys) of the child process, best of --repeat, unless marked wall:

- cold: `prover check --proofs-mode off`;
- warm: a store filled by a first run (records are re-decided, never trusted on their word);
- signed: a store filled with a proof key, read with `--recheck-budget 0` and the key and
  `--no-result-cache` (each obligation's record served on its signature: no decision at all,
  but the model is still read and compiled);
- served: the same command without `--no-result-cache`: the signed run record of the
  unchanged check answers it at start-up (`compiler.cli.run_record`; trees without it
  print the signed figure again);
- j1w / j2w: wall seconds of cold with `--jobs 1` / `--jobs 2` (workers help wall time only;
  j2cpu is the CPU of the --jobs 2 process itself: its workers are terminated, not
  reaped, at exit, so their CPU is not counted; the two are run alternately);
- npuc: `npuc compile -o PROGRAM` (cold, no store);
- decide: the decisions alone, the sum of the decided verdicts' own times in a
  `compile_model` run inside this process (no start-up, no frontend, no passes).

Ratios printed: warm/cold, signed/cold, served/cold, j2w/j1w, npuc/cold and cold/decide
(the overhead
around the decisions), and with --baseline each figure against the same command run on a
copy of the repository at that revision (`git archive`, in a temporary directory), in this
run. Bytecode is cached under a temporary prefix for both (as an installed package has it),
so neither pays for compiling sources. The floor of any warm run is `prover --version`
(interpreter start-up and the CLI's imports), printed first.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

ROOT = Path(__file__).resolve().parent.parent


def chain_model(sites: int, k: int = 16) -> onnx.ModelProto:
    """`sites` QLinearMatMul -> QLinearSigmoid pairs in a chain (input x[1, k])."""
    nodes, inits = [], []
    cur = "x"
    for i in range(sites):
        w = np.random.default_rng(i).integers(-127, 128, size=(k, k)).astype(np.int8)
        f32 = {f"a_s{i}": 1 / 256, f"w_s{i}": 0.01, f"y_s{i}": 0.05, f"o_s{i}": 1 / 256}
        inits += [nh.from_array(w, f"W{i}"), nh.from_array(np.int8(0), f"z{i}"),
                  nh.from_array(np.int8(-128), f"o_z{i}")]  # fmt: skip
        inits += [nh.from_array(np.float32(v), n) for n, v in f32.items()]
        mm_in = [cur, f"a_s{i}", f"z{i}", f"W{i}", f"w_s{i}", f"z{i}", f"y_s{i}", f"z{i}"]
        act_in = [f"h{i}", f"y_s{i}", f"z{i}", f"o_s{i}", f"o_z{i}"]
        nodes += [
            oh.make_node("QLinearMatMul", mm_in, [f"h{i}"], name=f"mm{i}"),
            oh.make_node("QLinearSigmoid", act_in, [f"y{i}"], name=f"act{i}",
                         domain="com.microsoft"),
        ]  # fmt: skip
        cur = f"y{i}"
    g = oh.make_graph(
        nodes,
        f"chain{sites}",
        [oh.make_tensor_value_info("x", TP.INT8, [1, k])],
        [oh.make_tensor_value_info(cur, TP.INT8, [1, k])],
        inits,
    )
    opsets = [oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)]
    m = oh.make_model(g, opset_imports=opsets)
    onnx.checker.check_model(m)
    return m


def per_channel_model(n: int = 2048, k: int = 16) -> onnx.ModelProto:
    """One QLinearMatMul (`n` per-channel weight scales) -> QLinearSigmoid site, x[1, k]."""
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, size=(k, n)).astype(np.int8)
    inits = [
        nh.from_array(w, "W"),
        nh.from_array(rng.uniform(0.002, 0.02, n).astype(np.float32), "w_s"),
        nh.from_array(np.zeros(n, np.int8), "w_z"),
        nh.from_array(np.int8(0), "z"),
        nh.from_array(np.int8(-128), "o_z"),
        *(nh.from_array(np.float32(v), m) for m, v in
          {"a_s": 0.02, "y_s": 0.05, "o_s": 1 / 256}.items()),
    ]  # fmt: skip
    nodes = [
        oh.make_node("QLinearMatMul", ["x", "a_s", "z", "W", "w_s", "w_z", "y_s", "z"], ["h"]),
        oh.make_node("QLinearSigmoid", ["h", "y_s", "z", "o_s", "o_z"], ["y"],
                     domain="com.microsoft"),
    ]  # fmt: skip
    g = oh.make_graph(
        nodes,
        f"per_channel{n}",
        [oh.make_tensor_value_info("x", TP.INT8, [1, k])],
        [oh.make_tensor_value_info("y", TP.INT8, [1, n])],
        inits,
    )
    opsets = [oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)]
    m = oh.make_model(g, opset_imports=opsets)
    onnx.checker.check_model(m)
    return m


def _env(root: Path, pyc: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = pyc
    env["PYTHONPATH"] = str(root)
    return env


def _run(argv: list[str], root: Path, env: dict[str, str], repeat: int) -> tuple[float, float]:
    """Best child (CPU seconds, wall seconds) of `argv` run in `root` (exit 0 or 1 required:
    1 is a refuted site, still a complete run)."""
    cpu = wall = float("inf")
    for _ in range(repeat):
        r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        p = subprocess.run(argv, cwd=root, env=env, capture_output=True)
        r1, t1 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        if p.returncode not in (0, 1):
            sys.exit(f"{' '.join(argv[2:])} exited {p.returncode}: {p.stderr.decode()[-400:]}")
        cpu = min(cpu, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
        wall = min(wall, t1 - t0)
    return cpu, wall


def _interleaved(
    a: list[str], b: list[str], root: Path, env: dict[str, str], repeat: int
) -> tuple[tuple[float, float], tuple[float, float]]:
    """`_run` of `a` and of `b`, alternating run by run (a drifting load skews both alike)."""
    ra = rb = (float("inf"), float("inf"))
    for _ in range(repeat):
        ca, wa = _run(a, root, env, 1)
        cb, wb = _run(b, root, env, 1)
        ra, rb = (min(ra[0], ca), min(ra[1], wa)), (min(rb[0], cb), min(rb[1], wb))
    return ra, rb


def _cpu(argv: list[str], root: Path, env: dict[str, str], repeat: int) -> float:
    return _run(argv, root, env, repeat)[0]


def decide_seconds(model: Path, target: str | None, repeat: int) -> float:
    """The decisions alone: the sum of the decided verdicts' own times (seconds) in a
    `compile_model` run in this process, best of `repeat` (the current tree only)."""
    from compiler.api import compile_model
    from prover.segments import clear_shared_steps
    from prover.verdict import Verdict

    best = float("inf")
    for _ in range(repeat):
        clear_shared_steps()  # each run decides cold, as the CLI's process does
        r = compile_model(str(model), "bitwise", target)
        vs = r.context.verdicts.values() if r.context is not None else ()
        ms = sum(v.time_ms for v in vs if isinstance(v, Verdict) and not v.cached)
        best = min(best, ms / 1000)
    return best


def figures(
    root: Path, model: Path, tmp: Path, repeat: int, target: str | None
) -> dict[str, float]:
    """cold / warm / signed / j1w / j2w / j2cpu / npuc seconds on `model` from `root`."""
    env = _env(root, str(tmp / "pyc"))
    tgt = [] if target is None else ["--target", target]
    cli = [sys.executable, "-m"]
    check = [*cli, "compiler.cli.prover", "check", str(model), "--no-progress", *tgt]
    key = tmp / "key"
    key.write_text("bench key\n")
    store, signed = (
        tmp / f"store-{root.name}-{model.stem}",
        tmp / f"signed-{root.name}-{model.stem}",
    )
    off = [*check, "--proofs-mode", "off"]
    _cpu(off, root, env, 1)  # bytecode cached for everyone
    _cpu([*check, "--proofs", str(store)], root, env, 1)
    _cpu([*check, "--proofs", str(signed), "--proof-key-file", str(key)], root, env, 1)
    sig = ["--proofs", str(signed), "--proof-key-file", str(key), "--recheck-budget", "0"]
    has_records = (root / "compiler" / "cli" / "run_record.py").exists()
    per_record = [*sig, "--no-result-cache"] if has_records else sig
    _cpu([*check, *sig], root, env, 1)  # writes the run record (a later run serves it)
    j1, j2 = _interleaved([*off, "--jobs", "1"], [*off, "--jobs", "2"], root, env, repeat)
    npuc = [*cli, "compiler.cli.npuc", "compile", str(model), "--no-progress", *tgt]
    return {
        "cold": _cpu(off, root, env, repeat),
        "warm": _cpu([*check, "--proofs", str(store)], root, env, repeat),
        "signed": _cpu([*check, *per_record], root, env, repeat),
        "served": _cpu([*check, *sig], root, env, repeat),
        "j1w": j1[1],
        "j2w": j2[1],
        "j2cpu": j2[0],
        "npuc": _cpu([*npuc, "-o", str(tmp / "program.json")], root, env, repeat),
    }


def _checkout(rev: str, into: Path) -> Path:
    """The repository at `rev`, extracted with `git archive` (the working tree untouched)."""
    tar = into / "base.tar"
    with tar.open("wb") as f:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev], stdout=f, check=True)
    base = into / "base"
    with tarfile.open(tar) as t:
        t.extractall(base, filter="data")
    return base


COLS = ("cold", "warm", "signed", "served", "j1w", "j2w", "j2cpu", "npuc")


def _row(name: str, label: str, f: dict[str, float]) -> str:
    ratios = (
        f"  {f['warm'] / f['cold']:9.2f} {f['signed'] / f['cold']:11.2f}"
        f" {f['served'] / f['cold']:11.3f}"
        f" {f['j2w'] / f['j1w']:7.2f} {f['npuc'] / f['cold']:9.2f}"
    )
    if "decide" in f:
        ratios += f" {f['decide']:7.3f}s {f['cold'] / max(f['decide'], 1e-9):11.1f}"
    return f"{name:>7} {label:>8} " + " ".join(f"{f[c]:6.2f}s" for c in COLS) + ratios


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sites", type=int, nargs="+", default=[1, 16, 256])
    ap.add_argument("--no-columns", action="store_true", help="skip the 2048-column model")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (best CPU)")
    ap.add_argument("--baseline", metavar="REV", help="also run the commands at this revision")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        base = _checkout(args.baseline, tmp) if args.baseline else None
        version = [sys.executable, "-m", "compiler.cli.prover", "--version"]
        env = _env(ROOT, str(tmp / "pyc"))
        _cpu(version, ROOT, env, 1)
        floor = _cpu(version, ROOT, env, args.repeat)
        print(f"floor: `prover --version` {floor:.2f}s CPU (start-up + CLI imports)")
        print(f"{'model':>7} {'tree':>8} " + " ".join(f"{c:>7}" for c in COLS)
              + "  warm/cold signed/cold served/cold j2w/j1w npuc/cold  decide cold/decide")  # fmt: skip
        models: list[tuple[str, onnx.ModelProto, str | None]] = [
            (f"{n}", chain_model(n), None) for n in args.sites
        ]
        if not args.no_columns:
            float_target = str(ROOT / "npu_backend" / "targets" / "npu_float.toml")
            models.append(("pc2048", per_channel_model(), float_target))
        for name, proto, target in models:
            model = tmp / f"m{name}.onnx"
            onnx.save(proto, model)
            cur = figures(ROOT, model, tmp, args.repeat, target)
            cur["decide"] = decide_seconds(model, target, args.repeat)
            print(_row(name, "current", cur), flush=True)
            if base is not None:
                old = figures(base, model, tmp, args.repeat, target)
                print(_row(name, args.baseline[:8], old))
                print(f"{name:>7} {'cur/base':>8} "
                      + " ".join(f"{cur[c] / old[c]:6.2f}x" for c in COLS))  # fmt: skip
    print(
        f"CPU seconds (user+sys) of each child process, best of {args.repeat}; j1w/j2w wall "
        "seconds; decide: the decided verdicts' own times in one in-process compile"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
