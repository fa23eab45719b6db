"""Build the model zoo: random-weight torch models, exported and quantized by ONNX Runtime.

    pip install -e ".[zoo]"        # torch, torchvision, transformers (README: install notes)
    python3 examples/zoo/build.py --list                 # architectures and variants (no torch)
    python3 examples/zoo/build.py --out DIR              # the whole zoo (~190 files)
    python3 examples/zoo/build.py --out DIR --only resnet18 bert
    python3 examples/zoo/build.py --small                # rewrites examples/zoo/small/
    python3 examples/zoo/build.py --small --check        # exit 1 if a rebuild differs

For each architecture: seeded random weights, BatchNorm statistics warmed on random data
(train-mode forward passes, then eval), `torch.onnx.export` (opset 17) to
`DIR/float/<arch>.onnx`, then every variant of the architecture (variants.py) with
`onnxruntime.quantization` to `DIR/<arch>__<variant>.onnx`, calibrated on 8 random input
sets. `DIR/manifest.toml` lists every model file with its architecture and family.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import archs as zoo_archs  # noqa: E402
import manifest  # noqa: E402
from variants import file_name  # noqa: E402

DEFAULT_OUT = HERE / "out"  # git-ignored
SMALL_OUT = HERE / "small"  # committed


def _list(selected: list[zoo_archs.Arch]) -> None:
    total = 0
    for a in selected:
        total += len(a.variants)
        print(f"{a.name:20} {a.family:5} {len(a.variants):2} variants  {a.note}")
        print(" " * 27 + " ".join(v.name for v in a.variants))
    print(f"{len(selected)} architectures, {total} models")


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for p in ("torch", "torchvision", "transformers", "onnx", "onnxruntime"):
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            out[p] = "not installed"
    return out


def _need_zoo_extra() -> None:
    missing = []
    for mod in ("torch", "torchvision", "transformers"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        sys.exit(f"error: {', '.join(missing)} not installed; run: pip install -e '.[zoo]'")


def build(selected: list[zoo_archs.Arch], out: Path, keep_float: bool) -> int:
    """Build every variant of `selected` into `out`; return the number of failures."""
    import onnxruntime
    from export import export, sampler
    from quantize import quantize

    # the quantizer's advice ("consider pre-processing", ...) and ORT's graph warnings
    logging.getLogger().setLevel(logging.ERROR)
    onnxruntime.set_default_logger_severity(3)

    out.mkdir(parents=True, exist_ok=True)
    float_dir = out / "float"
    entries: dict[str, manifest.Entry] = {}
    try:
        entries = {e.file: e for e in manifest.read(out) if (out / e.file).exists()}
    except FileNotFoundError:
        pass
    header = {"built": datetime.date.today().isoformat()}
    header.update({f"version_{k}": v for k, v in _versions().items()})
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for a in selected:
            t0 = time.perf_counter()
            sample = sampler(a)
            names = [i.name for i in a.inputs]
            fdir = float_dir if keep_float else Path(tmp)
            fdir.mkdir(parents=True, exist_ok=True)
            try:
                fmodel = export(a, fdir / f"{a.name}.onnx", sample)
            except Exception as exc:  # an export that fails loses only its architecture
                failures += len(a.variants)
                print(
                    f"FAILED export of {a.name}: {type(exc).__name__}: {exc}"[:400], file=sys.stderr
                )
                continue
            for e in [e for e in entries.values() if e.arch == a.name]:
                del entries[e.file]
            for v in a.variants:
                fname = file_name(a.name, v)
                try:
                    quantize(fmodel, out / fname, v, names, sample)
                except Exception as exc:  # report and go on: one variant must not stop the zoo
                    failures += 1
                    print(f"FAILED {fname}: {type(exc).__name__}: {exc}", file=sys.stderr)
                    continue
                entries[fname] = manifest.Entry(fname, a.name, a.family, v.name, a.note)
            print(f"{a.name}: {len(a.variants)} variants, {time.perf_counter() - t0:.1f} s")
            manifest.write(out, list(entries.values()), header)  # a stopped build keeps its list
    manifest.write(out, list(entries.values()), header)
    print(f"{len(entries)} models listed in {out / manifest.NAME}")
    return failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help=f"output directory (default {DEFAULT_OUT})")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="only these architectures")
    ap.add_argument(
        "--small", action="store_true", help=f"the committed small set (default --out {SMALL_OUT})"
    )
    ap.add_argument(
        "--list", action="store_true", help="list architectures and variants, build nothing"
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help="rebuild into a temporary directory, compare with --out",
    )
    args = ap.parse_args(argv)
    try:
        selected = zoo_archs.select(args.only, args.small)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.list:
        _list(selected)
        return 0
    _need_zoo_extra()
    out = args.out or (SMALL_OUT if args.small else DEFAULT_OUT)
    if args.check:
        return check(selected, out)
    return 1 if build(selected, out, keep_float=not args.small) else 0


def check(selected: list[zoo_archs.Arch], out: Path) -> int:
    """Rebuild `selected` into a temporary directory; 1 if any model file differs from `out`."""
    with tempfile.TemporaryDirectory() as tmp:
        if build(selected, Path(tmp), keep_float=False):
            return 1
        stale = [
            f.name
            for f in sorted(Path(tmp).glob("*.onnx"))
            if not (out / f.name).exists() or (out / f.name).read_bytes() != f.read_bytes()
        ]
    for name in stale:
        print(f"differs: {out / name}", file=sys.stderr)
    print(f"{len(stale)} model(s) differ from a rebuild")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
