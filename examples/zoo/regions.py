"""Count the unary activations of a zoo and what the compiler does with each (issue 23).

    python3 examples/zoo/regions.py DIR [--jobs 2] [--timeout 900] [--target npu_float]
        [--json OUT] [--only ARCH...]
    python3 examples/zoo/regions.py --from-json OUT

Run it from the repository root (it imports this checkout). For each model of
`DIR/manifest.toml` (or each `*.onnx` in DIR), in a fresh process with a timeout:

- **present**: every HardSigmoid, HardSwish, SiLU (a Sigmoid whose output and input meet
  again in a Mul: `x * sigmoid(x)`, through any Q/DQ pairs; in QOperator form QLinearSigmoid
  and QLinearMul), GELU (an Erf, a Gelu/FastGelu op, or the tanh form's `Pow(x, 3)`) and
  LeakyRelu (LeakyRelu or QLinearLeakyRelu) node of the ONNX file; **after compute** when
  the value it reads comes, through Q/DQ only, from a Conv / MatMul / Gemm (or their
  QLinear/QGemm/Integer forms);
- the model is compiled (`compiler.api.compile_model`, bitwise, the target, no proof
  store), and each activation is **proposed** when a site covers its node; the site's
  verdict (proven / refuted / unknown) or its rejection reason code is counted; an
  activation no site covers is "not proposed"; a model the compiler refuses counts its
  activations under "model not compiled" with the error's first line.

Prints one table per kind (counts over activations after compute) and the distinct
reasons; `--json` keeps every activation's outcome.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
KINDS = ("HardSigmoid", "HardSwish", "SiLU", "GELU", "LeakyRelu")
COMPUTE = {"Conv", "MatMul", "Gemm", "QLinearConv", "QLinearMatMul", "QGemm", "MatMulInteger",
           "ConvInteger"}  # fmt: skip
PASS = {"DequantizeLinear", "QuantizeLinear", "Identity", "Cast"}
LAYOUT = ("Reshape", "Squeeze", "Unsqueeze", "Flatten")  # ORT's Gemm rewrite adds a Reshape


def activations(m: Any) -> list[dict[str, Any]]:
    """Each unary activation of ONNX model `m`: kind, anchor node name, after compute."""
    prod = {o: n for n in m.graph.node for o in n.output}
    users: dict[str, list[Any]] = defaultdict(list)
    for n in m.graph.node:
        for i in n.input:
            users[i].append(n)

    def root(v: str) -> str:
        """`v` traced back through Q/DQ (and casts) to the value a real op produced."""
        seen = 0
        while v in prod and prod[v].op_type in PASS and seen < 16:
            v, seen = prod[v].input[0], seen + 1
        return v

    def downstream(v: str, depth: int = 0) -> list[Any]:
        """The users of `v`, through Q/DQ."""
        out = []
        for u in users.get(v, []):
            if u.op_type in PASS and depth < 8:
                out += downstream(u.output[0], depth + 1)
            else:
                out.append(u)
        return out

    consts = {i.name for i in m.graph.initializer}
    for n in m.graph.node:  # values computed from constants only (a DequantizeLinear of one)
        if n.op_type == "Constant" or n.input and all(i in consts for i in n.input if i):
            consts.update(n.output)

    def after_compute(v: str) -> bool:
        """Whether `v` comes from a compute op through Q/DQ and elementwise ops with a
        constant operand (GELU's Div, a bias Add) and reshapes."""
        for _ in range(16):
            v = root(v)
            p = prod.get(v)
            if p is None:
                return False
            if p.op_type in COMPUTE:
                return True
            varying = [i for i in p.input if i and i not in consts]
            if p.op_type not in ("Div", "Mul", "Add", "Sub", *LAYOUT) or len(varying) != 1:
                return False
            v = varying[0]
        return False

    def meets_input(n: Any) -> bool:
        """`n`'s output and its input meet again in a Mul (x * f(x)), through Q/DQ."""
        x = root(n.input[0])
        for u in downstream(n.output[0]):
            if u.op_type in ("Mul", "QLinearMul"):
                ins = [u.input[0], u.input[3]] if u.op_type == "QLinearMul" else u.input
                if x in {root(i) for i in ins}:
                    return True
        return False

    found = []
    for n in m.graph.node:
        op, kind = n.op_type, None
        if op == "HardSwish":
            kind = op
        elif op == "HardSigmoid":  # x * HardSigmoid(x) is HardSwish (quant_pre_process's form)
            kind = "HardSwish" if meets_input(n) else op
        elif op in ("LeakyRelu", "QLinearLeakyRelu"):
            kind = "LeakyRelu"
        elif op in ("Erf", "Gelu", "FastGelu", "BiasGelu"):
            kind = "GELU"
        elif op == "Pow":
            kind = "GELU" if any(u.op_type in ("Mul", "Add") for u in users[n.output[0]]) else None
        elif op in ("Sigmoid", "QLinearSigmoid"):
            kind = "SiLU" if meets_input(n) else None
        if kind is not None:
            found.append(
                {
                    "kind": kind,
                    "node": n.name,
                    "outputs": list(n.output),
                    "after_compute": after_compute(n.input[0]),
                }
            )
    return found


def survey_one(path: str, target: str) -> dict[str, Any]:
    """One model: its activations and each one's outcome (run in a child process)."""
    import onnx

    sys.path.insert(0, str(REPO))
    from compiler.api import compile_model
    from npu_backend.target import load_target, shipped_targets

    m = onnx.load(path)
    acts = activations(m)
    if not acts:
        return {"acts": []}
    try:
        r = compile_model(m, "bitwise", load_target(shipped_targets()[target]), proofs_mode="off")
    except Exception as e:  # noqa: BLE001 - the model's outcome, reported
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        for a in acts:
            a["outcome"] = "model not compiled"
            a["error"] = first
        return {"acts": acts}
    for a in acts:
        # ORT may inline the op (HardSwish -> HardSigmoid, Mul): its nodes are then named
        # after the op's output
        names = {a["node"], *a.pop("outputs")}
        covering = [s for s in r.sites if names & set(s.nodes)]
        refused = _refused_region_site(r, names) if not covering else None
        if refused is not None:
            covering = [refused]
        if not covering:
            a["outcome"] = _unproposed(r.original, names)
            continue
        s = min(covering, key=lambda s: len(s.nodes))  # its own site, not a longer chain's
        if any(
            n.op == "host_onnx" and n.attrs.get("onnx_op") in ("Conv", "MatMul", "Gemm")
            for n in s.chain
        ):  # a walk through a float compute op to an earlier one: not the activation's own
            a["outcome"] = "not proposed: float compute"
            continue
        a["pattern"] = s.pattern
        if s.verdict == "rejected":
            a["outcome"] = f"rejected: {s.reason.code}"
            a["message"] = s.reason.message[:300]
        else:
            a["outcome"] = str(s.verdict)
    return {"acts": acts}


def _refused_region_site(r: Any, names: set[str]) -> Any:
    """The site of a region the frontend refused (its first node carries `region_refusal`)
    that the activation (nodes `names`) belongs to, found backwards through host ops."""
    g = r.original
    node = next((n for n in g.nodes if names & set(n.origin)), None)
    for _ in range(8):
        if node is None or node.op != "host_onnx":
            return None
        if node.attrs.get("region_refusal") is not None:
            return next((s for s in r.sites if s.activation.name == node.name), None)
        node = g.producer(node.inputs[0]) if node.inputs else None
    return None


def _unproposed(g: Any, names: set[str]) -> str:
    """Why no site covers the activation (nodes `names`) in IR graph `g`: its compute op is
    a float op ORT's session runs on the host (`float_compute`), or plainly not proposed."""
    node = next((n for n in g.nodes if names & set(n.origin)), None)
    if node is None:
        return "not proposed"
    v = node.inputs[0]
    for _ in range(8):
        p = g.producer(v)
        if p is None or p.op != "host_onnx":
            return "not proposed"
        op = p.attrs.get("onnx_op")
        if op in ("Conv", "MatMul", "Gemm"):
            return "not proposed: float compute"
        if op not in ("QuantizeLinear", "DequantizeLinear", "Cast"):
            return "not proposed"
        v = p.inputs[0]
    return "not proposed"


def _models(directory: Path, only: list[str] | None) -> list[Path]:
    man = directory / "manifest.toml"
    if man.exists():
        import tomllib

        rows = tomllib.loads(man.read_text()).get("model", [])
        files = [directory / r["file"] for r in rows if not only or r.get("arch") in only]
    else:
        files = sorted(directory.glob("*.onnx"))
    return [f for f in files if f.exists()]


def _child(path: Path, target: str, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__)), "--one", str(path), "--target", target]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"model": path.stem, "error": f"timed out after {timeout:.0f} s", "acts": []}
    try:
        out = json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        err = [ln for ln in p.stderr.splitlines() if ln.strip()]
        return {"model": path.stem, "error": (err or ["no output"])[-1][:200], "acts": []}
    out["model"] = path.stem
    return out


def table(results: list[dict[str, Any]]) -> str:
    """The per-kind table (activations after compute) and the reasons, as Markdown."""
    per: dict[str, Counter] = {k: Counter() for k in KINDS}
    reasons: Counter = Counter()
    examples: dict[str, str] = {}
    for r in results:
        for a in r["acts"]:
            c = per[a["kind"]]
            c["present"] += 1
            if not a["after_compute"]:
                continue
            c["after compute"] += 1
            o = a.get("outcome", "")
            if not o.startswith("not proposed") and o != "model not compiled":
                c["proposed"] += 1
            c[o] += 1
            if o not in ("proven", "not proposed: float compute"):
                key = f"{a['kind']}: {o}"
                reasons[key] += 1
                examples.setdefault(key, f"{r['model']}: {a.get('message') or a.get('error', '')}")
    cols = ["present", "after compute", "proposed", "proven", "refuted", "unknown"]
    tail = ["not proposed: float compute", "not proposed", "model not compiled"]
    lines = [
        f"| kind | {' | '.join(cols)} | rejected (by reason) | {' | '.join(tail)} |",
        "|---|" + "---|" * (len(cols) + 1 + len(tail)),
    ]
    for k in KINDS:
        c = per[k]
        rej = ", ".join(
            f"{o.split(': ', 1)[1]}: {n}" for o, n in sorted(c.items()) if o.startswith("rejected")
        )
        vals = [str(c[x]) for x in cols]
        rest = [str(c[x]) for x in tail]
        lines.append(f"| {k} | {' | '.join(vals)} | {rej or '–'} | {' | '.join(rest)} |")
    lines += ["", "| count | kind: outcome | example (model: message) |", "|---|---|---|"]
    for key, n in reasons.most_common():
        ex = examples[key].replace("|", "\\|")
        lines.append(f"| {n} | {key} | {ex} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", type=Path, nargs="?")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--target", default="npu_float")
    ap.add_argument("--only", nargs="+", metavar="ARCH")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--from-json", type=Path)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(survey_one(a.one, a.target)))
        return 0
    if a.from_json:
        print(table(json.loads(a.from_json.read_text())))
        return 0
    if a.directory is None:
        ap.error("a zoo directory or --from-json is required")
    files = _models(a.directory, a.only)
    with ThreadPoolExecutor(a.jobs) as ex:
        results = list(ex.map(lambda f: _child(f, a.target, a.timeout), files))
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
