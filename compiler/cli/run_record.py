"""Signed run records: a repeated `prover check` of an unchanged model, answered at start-up.

A check whose every input is unchanged gives the same report, so a second run need not
load the model, the compiler or the prover. With a proof store in `rw` mode, a signing
key and `--recheck-budget 0` (the user's statement that a valid signature is trust
enough), a completed check (exit 0 or 1, nothing unknown, no gate miss) leaves a record
under `<store>/runs/`: its report text, exit code and store summary, and the
fingerprint of everything the result depends on, HMAC-signed with the key
(`prover.trust`). A later run with the same fingerprint prints that report instead of
checking again. The fingerprint holds:

- the model file's bytes (sha256), the bytes of every external-data range its tensors
  were read from, and the target file's, when a path names it, each hashed as the check
  read it (`compiler.cli.inputs_read`), never read again when the record is saved: a
  file changed during the check (or a FIFO fed other bytes) never leaves the old report
  under the new bytes; the model and store paths as given (reports name them);
- every option that can change the report (policy, target, reference, solver, timeout,
  format, indent, synthesis, schedule strategy, proofs mode, recheck budget);
- the tool: a hash of every file of `compiler/`, `prover/` and `npu_backend/` (sources,
  shipped targets, schemas), so any change to the code or a target invalidates it;
- the dependencies: every installed distribution's name and version;
- the host: CPU model and feature flags (ONNX Runtime picks its kernels by them: the
  u8s8 GEMM is exact with VNNI and saturates without), machine, Python version;
- the `NPUFUSION_*` and `ORT_*` environment (not the key).

Tool, dependencies, host, environment and key are taken before the check and again at
save; a run during which any of them changed leaves no record. Only a regular file is
served (a FIFO's bytes are read once, by the check).

Served records are never edited in place: one with an invalid signature (edited, or made
with another key) is ignored with a warning, and the check runs. The proof records a run
relied on must still be in the store, byte for byte (their sha256 is in the run record), so
serving never leaves a store the `ro` gate would then fail on, nor answers for a store
that changed under it. `runs/` carries a `.gitignore`: these records are local to the machine and
never committed with the store. The newest `MAX_RECORDS` are kept.

Many checks may share one store at once: records are written whole (`prover.store_files`),
and a record or proof record another process removes meanwhile is a miss, never an error:
a complete check is never reported as failed for its run record (a record that cannot be
written is warned about on stderr, and the check keeps its exit code).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compiler.cli.inputs_read import InputsRead, external_on_disk
from prover.store_files import mtimes, remove_stale_temps, write_atomic
from prover.trust import KEY_ENV, canonical_json, key_id, resolve_key, sign, verify

FORMAT = "npu-prover-run/1"
RUNS_DIR = "runs"
MAX_RECORDS = 64
PACKAGES = ("compiler", "prover", "npu_backend")
EXIT_CACHED = (0, 1)  # complete runs only: never a bad input, unknown, gate miss or bug
# options that cannot change the report (the model and target enter by content)
NOT_IN_KEY = frozenset(
    {"command", "model", "jobs", "no_progress", "debug", "output", "emit_tests", "proofs",
     "proof_key_file", "result_cache"}
)  # fmt: skip


def _sha_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sha_regular_file(path: Path) -> str:
    """sha256 of a regular file's bytes (OSError for anything else: a FIFO or device
    would be consumed here, and the check would read other bytes)."""
    if not path.is_file():
        raise OSError(f"not a regular file: {path}")
    return _sha_file(path)


def _package_dirs() -> list[Path]:
    """The source directories of the tool's packages (without importing them)."""
    from importlib.util import find_spec

    out = []
    for name in PACKAGES:
        spec = find_spec(name)
        locations = [] if spec is None else list(spec.submodule_search_locations or [])
        if len(locations) != 1:
            raise OSError(f"cannot locate package {name}")
        out.append(Path(locations[0]))
    return out


def tool_fingerprint() -> str:
    """sha256 over the relative path and bytes of every file of the tool's packages."""
    h = hashlib.sha256()
    for root in _package_dirs():
        base = str(root)
        for d, subdirs, files in os.walk(base):
            subdirs[:] = sorted(s for s in subdirs if s != "__pycache__")
            rel = os.path.relpath(d, base).replace(os.sep, "/")
            for f in sorted(files):
                if f.endswith((".pyc", ".pyo")):
                    continue
                with open(os.path.join(d, f), "rb") as fh:
                    digest = hashlib.sha256(fh.read()).digest()
                h.update(f"{root.name}/{rel}/{f}\0".encode())
                h.update(digest)
    return h.hexdigest()


def dependency_fingerprint() -> str:
    """sha256 over the names (which carry the versions) of every installed distribution."""
    names: set[str] = set()
    for entry in sys.path:
        try:
            with os.scandir(entry or ".") as it:
                names.update(e.name for e in it if e.name.endswith((".dist-info", ".egg-info")))
        except OSError:
            continue
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()


def host_fingerprint() -> dict[str, str]:
    """The CPU (model name and feature flags), machine and Python that ran the check."""
    cpu: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            k, _, v = line.partition(":")
            k = k.strip()
            if k in ("model name", "flags", "Features", "CPU implementer", "CPU part"):
                cpu.setdefault(k, " ".join(sorted(v.split())) if k in ("flags", "Features")
                               else v.strip())  # fmt: skip
    except OSError:
        pass
    if "flags" not in cpu and "Features" not in cpu:
        raise OSError("the CPU's feature flags are unknown on this host")
    u = os.uname()
    return {
        "cpu": hashlib.sha256(canonical_json(cpu).encode()).hexdigest(),
        "machine": u.machine,
        "system": u.sysname,
        "python": sys.version,
    }


def _environment() -> dict[str, str]:
    return {
        k: v
        for k, v in sorted(os.environ.items())
        if k.startswith(("NPUFUSION_", "ORT_")) and k != KEY_ENV
    }


def _options(args: argparse.Namespace) -> dict[str, str]:
    return {k: str(v) for k, v in sorted(vars(args).items()) if k not in NOT_IN_KEY}


def _target(spec: str | None) -> str:
    """The target as the check will load it: a file's bytes, else a shipped name (whose
    file is part of the tool fingerprint)."""
    if spec is None:
        return "default"
    p = Path(spec)
    return f"file:{_sha_regular_file(p)}" if p.exists() else f"name:{spec}"


def applies(args: argparse.Namespace) -> bool:
    """Whether this command line may use run records: a store in rw mode, a key,
    --recheck-budget 0, no --emit-tests or --also-write (files to write) and no
    --no-result-cache."""
    mode = args.proofs_mode or ("rw" if args.proofs else "off")
    return (
        bool(getattr(args, "result_cache", False))
        and args.proofs is not None
        and mode == "rw"
        and args.recheck_budget == 0
        and not args.emit_tests
        and not getattr(args, "also_write", None)  # a served record writes one report only
    )


def context(args: argparse.Namespace, key: bytes) -> dict[str, Any]:
    """The part of the fingerprint that is not a file the check reads: paths, options,
    tool, dependencies, host, environment and key (OSError if any cannot be read)."""
    return {
        "paths": {"model": args.model, "proofs": args.proofs},  # reports name them as given
        "options": _options(args),
        "tool": tool_fingerprint(),
        "dependencies": dependency_fingerprint(),
        "host": host_fingerprint(),
        "environment": _environment(),
        "key_id": key_id(key),
    }


def fingerprint(args: argparse.Namespace, key: bytes, model: str, target: str) -> dict[str, Any]:
    """Everything the report of `args` depends on: the digests of the model and target
    (`InputsRead.model` / `.target`) and the `context`."""
    return {"model": model, "target": target, **context(args, key)}


def on_disk(args: argparse.Namespace, key: bytes) -> dict[str, Any]:
    """The fingerprint of `args` as the files are now (to look a record up; OSError if a
    file cannot be read, or is not a regular file)."""
    return fingerprint(args, key, _sha_regular_file(Path(args.model)), _target(args.target))


def started(args: argparse.Namespace) -> dict[str, Any] | None:
    """The `context` before a check that may save a run record (None if it may not);
    `save` writes no record if the context changed during the check."""
    if not applies(args):
        return None
    key = _key(args)
    if key is None:
        return None
    try:
        return context(args, key)
    except OSError:
        return None


def _path(store: Path, fp: dict[str, Any]) -> Path:
    return (
        store / RUNS_DIR / (hashlib.sha256(canonical_json(fp).encode()).hexdigest()[:32] + ".json")
    )


def _key(args: argparse.Namespace) -> bytes | None:
    try:
        return resolve_key(args.proof_key_file)
    except (OSError, ValueError):
        return None  # the check itself reports a bad key as bad usage


def serve(prog: str, args: argparse.Namespace) -> int | None:
    """Print the report of an unchanged check from its signed run record and return its
    exit code; None when there is no valid record (then the check runs)."""
    if not applies(args):
        return None
    key = _key(args)
    if key is None:
        return None
    try:
        fp = on_disk(args, key)
        path = _path(Path(args.proofs), fp)
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # FileNotFoundError: no record (or pruned meanwhile)
        return None
    why = _invalid(rec, fp, key, Path(args.proofs), Path(args.model))
    if why is not None:
        print(f"{prog}: ignoring run record {path}: {why}; checking again", file=sys.stderr)
        return None
    from compiler.cli.outputs import write_output

    write_output(rec["output"], args.output, prog, f"{args.format} report")
    for line in rec["stderr"]:
        print(line, file=sys.stderr)
    print(
        f"{prog}: report served from signed run record {path} (written {rec['written']}; "
        "model, options, tool, dependencies and host unchanged); --no-result-cache checks again",
        file=sys.stderr,
    )
    return int(rec["exit_code"])


def _invalid(rec: Any, fp: dict[str, Any], key: bytes, store: Path, model: Path) -> str | None:
    """Why `rec` must not be served for `fp` (None: serve it)."""
    if not isinstance(rec, dict) or rec.get("format") != FORMAT:
        return "not a run record of this format"
    body = {k: v for k, v in rec.items() if k != "signature"}
    if not verify(key, rec.get("signature"), body):
        return "its signature is not valid for this key (edited, or signed with another key)"
    if rec.get("fingerprint") != fp:
        return "its fingerprint differs from this run's"
    if rec.get("exit_code") not in EXIT_CACHED or not isinstance(rec.get("output"), str):
        return "not the record of a complete check"
    stored = rec.get("external")
    why = None if stored is None else external_on_disk(model, stored)
    if why is not None:
        return f"the model's external-data files changed ({why})"
    records = rec.get("records")
    if not isinstance(records, dict):
        return "not the record of a complete check"
    for r, digest in records.items():
        try:
            now = _sha_file(store / r)
        except FileNotFoundError:
            return f"a proof record it relied on is gone from the store ({r})"
        except OSError:
            return f"a proof record it relied on cannot be read ({r})"
        if now != digest:
            return f"a proof record it relied on has changed in the store ({r})"
    return None


def save(
    prog: str,
    args: argparse.Namespace,
    inputs: InputsRead,
    output: str,
    exit_code: int,
    stderr: list[str],
    records: Sequence[tuple[Path, bytes]] | None,
    complete: bool,
    before: dict[str, Any] | None,
) -> Path | None:
    """Write the signed run record of a finished check, where `applies` and the check is
    `complete` (every site decided: nothing unknown, no gate miss) with exit 0 or 1.

    The record is keyed by `inputs`, the digests of what the check read, and by `before`
    (`started`: the context taken before the check), which must still hold. `records`:
    the proof records the report relies on and their bytes (`check_run.relied_on_records`;
    None: the store changed under the check). A record that cannot be written is warned
    about on stderr; the check keeps its exit code."""
    if not (applies(args) and complete and exit_code in EXIT_CACHED):
        return None
    if before is None or records is None or inputs.model is None or inputs.target is None:
        return None
    import time

    key = _key(args)
    if key is None:
        return None
    store = Path(args.proofs)
    try:
        if context(args, key) != before:
            return None  # the tool, host, environment or key changed during the check
    except OSError:
        return None
    relied = {
        p.relative_to(store).as_posix(): hashlib.sha256(data).hexdigest()
        for p, data in sorted(records)
    }
    fp = {"model": inputs.model, "target": inputs.target, **before}
    body: dict[str, Any] = {
        "format": FORMAT,
        "fingerprint": fp,
        "exit_code": int(exit_code),
        "output": output,
        "stderr": list(stderr),
        "records": relied,
        "external": inputs.external_record(),
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    body["signature"] = sign(key, body)
    path = _path(store, fp)
    try:
        _write(path, json.dumps(body, sort_keys=True).encode())
    except OSError as e:
        print(
            f"{prog}: warning: run record not written ({e}); the check is complete", file=sys.stderr
        )
        return None
    return path


def _write(path: Path, data: bytes) -> None:
    runs = path.parent
    runs.mkdir(parents=True, exist_ok=True)
    ignore = runs / ".gitignore"
    if not ignore.exists():
        text = "# run records are local to this machine; never commit them\n*\n"
        write_atomic(ignore, text.encode())
    write_atomic(path, data)
    _prune(runs)


def _prune(runs: Path) -> None:
    """Keep the newest `MAX_RECORDS` run records, and remove temporary files killed writers
    left; a file another process removed meanwhile is already gone, not an error."""
    recs = sorted(mtimes(runs, ".json"), reverse=True)
    for _, old in recs[MAX_RECORDS:]:
        old.unlink(missing_ok=True)
    remove_stale_temps(runs)
