"""`prover check` at model scale: cold, warm store, signed warm store, --jobs 2 (issue 15).

One command:

    python3 bench/check_bench.py                       # 1 and 256 sites, best of 3
    python3 bench/check_bench.py --sites 256 --repeat 5
    python3 bench/check_bench.py --baseline 98f1a5e    # also the same runs at that commit

Models: chains of QLinearMatMul -> QLinearSigmoid sites (16x16 int8 weights, one row; every
site proven on the default target), built here. Each figure is the CPU time (user+sys) of
the `python -m compiler.cli.prover check` child process, best of --repeat:

- cold: `--proofs-mode off`;
- warm: a store filled by a first run (records are re-decided, never trusted on their word);
- signed: a store filled with a proof key, read with `--recheck-budget 0` and the key (served
  on signature: no decision at all);
- jobs2: cold with `--jobs 2`.

Ratios printed: warm/cold, signed/cold, jobs2/cold, and with --baseline each figure against
the same command run on a copy of the repository at that revision (`git archive`, in a
temporary directory), in this run. Bytecode is cached under a temporary prefix for both
(as an installed package has it), so neither pays for compiling sources.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
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


def _env(root: Path, pyc: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = pyc
    env["PYTHONPATH"] = str(root)
    return env


def _cpu(argv: list[str], root: Path, env: dict[str, str], repeat: int) -> float:
    """Best child CPU seconds of `argv` run in `root` (exit 0 required)."""
    best = float("inf")
    for _ in range(repeat):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run(argv, cwd=root, env=env, capture_output=True)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode != 0:
            sys.exit(f"{' '.join(argv[2:])} exited {p.returncode}: {p.stderr.decode()[-400:]}")
        best = min(best, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    return best


def figures(root: Path, model: Path, tmp: Path, repeat: int) -> dict[str, float]:
    """cold / warm / signed / jobs2 CPU seconds of `prover check` on `model` from `root`."""
    env = _env(root, str(tmp / "pyc"))
    check = [sys.executable, "-m", "compiler.cli.prover", "check", str(model), "--no-progress"]
    key = tmp / "key"
    key.write_text("bench key\n")
    store, signed = tmp / f"store-{root.name}", tmp / f"signed-{root.name}"
    _cpu([*check, "--proofs-mode", "off"], root, env, 1)  # bytecode cached for everyone
    _cpu([*check, "--proofs", str(store)], root, env, 1)
    _cpu([*check, "--proofs", str(signed), "--proof-key-file", str(key)], root, env, 1)
    return {
        "cold": _cpu([*check, "--proofs-mode", "off"], root, env, repeat),
        "warm": _cpu([*check, "--proofs", str(store)], root, env, repeat),
        "signed": _cpu(
            [
                *check,
                "--proofs",
                str(signed),
                "--proof-key-file",
                str(key),
                "--recheck-budget",
                "0",
            ],
            root,
            env,
            repeat,
        ),  # fmt: skip
        "jobs2": _cpu([*check, "--proofs-mode", "off", "--jobs", "2"], root, env, repeat),
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sites", type=int, nargs="+", default=[1, 256])
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (best CPU)")
    ap.add_argument("--baseline", metavar="REV", help="also run the commands at this revision")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        base = _checkout(args.baseline, tmp) if args.baseline else None
        cols = ("cold", "warm", "signed", "jobs2")
        print(f"{'sites':>5} {'tree':>8} " + " ".join(f"{c:>7}" for c in cols)
              + "  warm/cold signed/cold jobs2/cold")  # fmt: skip
        for n in args.sites:
            model = tmp / f"chain{n}.onnx"
            onnx.save(chain_model(n), model)
            rows = [("current", figures(ROOT, model, tmp, args.repeat))]
            if base is not None:
                rows.append((args.baseline[:8], figures(base, model, tmp, args.repeat)))
            for name, f in rows:
                print(
                    f"{n:5d} {name:>8} " + " ".join(f"{f[c]:6.2f}s" for c in cols)
                    + f"  {f['warm'] / f['cold']:9.2f} {f['signed'] / f['cold']:11.2f}"
                    f" {f['jobs2'] / f['cold']:10.2f}"
                )  # fmt: skip
            if base is not None:
                cur, old = rows[0][1], rows[1][1]
                print(f"{n:5d} {'cur/base':>8} "
                      + " ".join(f"{cur[c] / old[c]:6.2f}x" for c in cols))  # fmt: skip
    print("CPU seconds (user+sys) of the prover check process, best of", args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
