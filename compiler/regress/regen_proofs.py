"""Regenerate (or verify) the committed proof store for the shipped examples.

    python3 -m compiler.regress.regen_proofs            # rewrite proofs/ from scratch
    python3 -m compiler.regress.regen_proofs --check    # exit 1 unless the ro gate passes on all

Every shipped example (`examples/*.onnx`) on both shipped targets, and every other
configuration the README and `examples/ci/prover-gate.yml` run with
`--proofs proofs --proofs-mode ro`, is checked in rw mode into a fresh store,
which then replaces the records under `proofs/??/` (stale records go;
`proofs/counterexamples/` is left alone). Run it after any change to the
kernel's semantics (SEMANTICS_VERSION changes every obligation hash).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from prover.store_files import write_atomic

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
PROOFS = REPO / "proofs"

# Every example is checked under bitwise on each shipped target (None: the default,
# npu_float); (model file name, --policy, --target) beyond those.
TARGETS: tuple[str | None, ...] = (None, "npu_fixed")
EXTRA_CONFIGS: tuple[tuple[str, str, str | None], ...] = (("showcase.onnx", "bounded:1", None),)


def configs(examples: Path = EXAMPLES) -> list[tuple[Path, str, str | None]]:
    """Every (model, policy, target) the committed store must cover."""
    out: list[tuple[Path, str, str | None]] = [
        (m, "bitwise", t) for t in TARGETS for m in sorted(examples.glob("*.onnx"))
    ]
    out += [(examples / name, policy, target) for name, policy, target in EXTRA_CONFIGS]
    return out


def _run(model: Path, policy: str, target: str | None, store: Path, mode: str):
    from compiler.cli.check_run import CheckOptions, run_pipeline
    from prover.policy import Policy

    opts = CheckOptions(
        policy=Policy.parse(policy),
        target=target,
        proofs=str(store),
        proofs_mode=mode,
        progress=False,
    )
    return run_pipeline(str(model), opts)


def regenerate(store: Path = PROOFS, examples: Path = EXAMPLES) -> int:
    """Rewrite the records under `store` from a fresh rw run; returns the number written."""
    with tempfile.TemporaryDirectory(prefix="npufusion-proofs-") as tmp:
        fresh = Path(tmp)
        for model, policy, target in configs(examples):
            _run(model, policy, target, fresh, "rw")
        records = sorted(fresh.glob("??/*.json"))
        keep = {r.name for r in records}
        for old in store.glob("??/*.json"):
            if old.name not in keep:
                old.unlink(missing_ok=True)  # another process may have removed it
        for d in store.glob("??"):
            if d.is_dir() and not any(d.iterdir()):
                with contextlib.suppress(OSError):  # gone, or a record written meanwhile
                    d.rmdir()
        for rec in records:
            dest = store / rec.parent.name / rec.name
            if not _same_verdict(rec, dest):  # only timings differ: keep the file (no churn)
                dest.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(dest, rec.read_bytes())
    return len(records)


def _same_verdict(new: Path, old: Path) -> bool:
    try:
        a, b = json.loads(new.read_text()), json.loads(old.read_text())
    except (OSError, ValueError):  # missing (or removed meanwhile), or not JSON
        return False
    fields = ("status", "max_diff", "counterexample", "solver")
    return (
        a.get("obligation") == b.get("obligation")
        and ("signature" in a) == ("signature" in b)
        and all(a["verdict"].get(f) == b.get("verdict", {}).get(f) for f in fields)
    )


def verify(store: Path = PROOFS, examples: Path = EXAMPLES) -> list[str]:
    """One line per configuration whose ro gate fails on `store` (empty = all pass)."""
    bad = []
    for model, policy, target in configs(examples):
        run = _run(model, policy, target, store, "ro")
        if run.report.proof_misses:
            where = f"{model.name} --policy {policy}" + (f" --target {target}" if target else "")
            bad.append(f"{where}: {run.report.proof_misses[0]}")
    return bad


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: regenerate, or with --check verify, the committed store."""
    p = argparse.ArgumentParser(
        prog="python3 -m compiler.regress.regen_proofs", description=__doc__
    )
    p.add_argument("--proofs", type=Path, default=PROOFS, help="store directory (default proofs/)")
    p.add_argument("--check", action="store_true", help="only verify the ro gate on every config")
    args = p.parse_args(argv)
    if args.check:
        bad = verify(args.proofs)
        for line in bad:
            print(f"gate fails: {line}", file=sys.stderr)
        print(f"{len(configs()) - len(bad)} of {len(configs())} configurations pass the ro gate")
        return 1 if bad else 0
    n = regenerate(args.proofs)
    print(f"wrote {n} proof records to {args.proofs} ({len(configs())} configurations)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
