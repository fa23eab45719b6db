"""The zoo manifest: which models to check against which targets, policies and references.

TOML (or YAML, with pyyaml installed), paths and globs relative to the manifest's directory:

```toml
[defaults]                       # optional; else the command line's --target/--policy/--reference
targets = ["npu_float"]          # shipped names or TOML paths
policies = ["bitwise"]
references = ["onnx"]

[[models]]
path = "models/*.onnx"           # or paths = [...]; globs allowed (** too)
targets = ["npu_float", "npu_fixed"]   # optional, else the defaults
```

A directory instead of a manifest means every `*.onnx` under it (recursively) with the
defaults. Every mistake is a `ManifestError` (exit 2, one line), found before any check runs.
"""

from __future__ import annotations

import glob
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.cli.common import UsageError
from prover.errors import BadInput

AXES = ("targets", "policies", "references")
MODEL_KEYS = {"path", "paths", *AXES}


class ManifestError(UsageError):
    """A manifest that cannot be read or says something impossible (exit 2)."""


@dataclass(frozen=True)
class TaskSpec:
    """One check of the zoo: a model under one target, policy and reference.

    `model` is the path a worker opens; `label` names it in reports and baselines (relative
    to the manifest's directory, so it is the same on every machine); `target` is what
    `--target` would take and `target_name` the loaded target's name."""

    model: str
    label: str
    target: str | None
    target_name: str
    policy: str
    reference: str

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What matches this task with the same task of a baseline."""
        return (self.label, self.target_name, self.policy, self.reference)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.label,
            "target": self.target_name,
            "policy": self.policy,
            "reference": self.reference,
        }


@dataclass(frozen=True)
class Defaults:
    """The axes a model takes when the manifest does not name them (the command line's)."""

    targets: tuple[str | None, ...] = (None,)
    policies: tuple[str, ...] = ("bitwise",)
    references: tuple[str, ...] = ("onnx",)


def load(source: str, defaults: Defaults) -> list[TaskSpec]:
    """The tasks of a manifest file or a directory of models (ManifestError if none)."""
    p = Path(source)
    if p.is_dir():
        models = sorted(q for q in p.rglob("*.onnx") if q.is_file())
        if not models:
            raise ManifestError(f"zoo directory has no *.onnx file: {source}")
        found: list[Any] = [{"path": glob.escape(str(q.relative_to(p)))} for q in models]
        return _tasks(found, p, defaults, source)
    if not p.is_file():
        raise ManifestError(f"zoo manifest or directory not found: {source}")
    data = _parse(p)
    if not isinstance(data, dict):
        raise ManifestError(f"{source}: a manifest is a table with a 'models' list")
    unknown = sorted(set(data) - {"defaults", "models"})
    if unknown:
        raise ManifestError(f"{source}: unknown key {unknown[0]!r} (known: defaults, models)")
    defaults = _defaults(data.get("defaults", {}), defaults, p.parent, source)
    entries = data.get("models")
    if not isinstance(entries, list) or not entries:
        raise ManifestError(f"{source}: 'models' must be a non-empty list of tables")
    return _tasks(entries, p.parent, defaults, source)


def _parse(p: Path) -> Any:
    text = _read(p)
    if p.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError:
            raise ManifestError(
                f"{p}: a YAML manifest needs pyyaml: pip install 'npu-fusion-prover[gate]' "
                "(or write the manifest in TOML)"
            ) from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ManifestError(f"{p}: not valid YAML: {str(e).splitlines()[0]}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ManifestError(f"{p}: not valid TOML: {e}") from None


def _read(p: Path) -> str:
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(f"cannot read zoo manifest {p}: {e}") from None


def _strings(value: Any, what: str, source: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ManifestError(f"{source}: {what} must be a string or a non-empty list of strings")
    return tuple(value)


def _target_spec(spec: str, base: Path) -> str:
    """A target named in a manifest: a path relative to the manifest, else a shipped name."""
    p = Path(spec)
    q = p if p.is_absolute() else base / p
    return str(q.absolute()) if q.exists() or p.suffix == ".toml" else spec


def _defaults(table: Any, cli: Defaults, base: Path, source: str) -> Defaults:
    if not isinstance(table, dict):
        raise ManifestError(f"{source}: 'defaults' must be a table")
    unknown = sorted(set(table) - set(AXES))
    if unknown:
        raise ManifestError(f"{source}: defaults: unknown key {unknown[0]!r} (known: {AXES})")
    targets: tuple[str | None, ...] = cli.targets
    if "targets" in table:
        names = _strings(table["targets"], "defaults.targets", source)
        targets = tuple(_target_spec(t, base) for t in names)
    return Defaults(
        targets,
        _strings(table["policies"], "defaults.policies", source)
        if "policies" in table
        else cli.policies,
        _strings(table["references"], "defaults.references", source)
        if "references" in table
        else cli.references,
    )


def _model_paths(entry: dict[str, Any], base: Path, where: str) -> list[Path]:
    if ("path" in entry) == ("paths" in entry):
        raise ManifestError(f"{where}: give exactly one of 'path' or 'paths'")
    patterns = _strings(entry.get("path", entry.get("paths")), "path", where)
    out: list[Path] = []
    for pat in patterns:
        full = pat if Path(pat).is_absolute() else str(base / pat)
        hits = sorted(Path(h).absolute() for h in glob.glob(full, recursive=True))
        if not hits:
            raise ManifestError(f"{where}: {pat!r} matches no file")
        out.extend(h for h in hits if h not in out)
    return out


def _tasks(entries: list[Any], base: Path, defaults: Defaults, source: str) -> list[TaskSpec]:
    from compiler.cli.check_run import resolve_reference_option
    from compiler.cli.common import parse_policy, resolve_target

    targets: dict[str | None, str] = {}  # spec -> loaded name (each loaded once)
    out: dict[tuple[str, str, str, str], TaskSpec] = {}
    for i, entry in enumerate(entries):
        where = f"{source}: models[{i}]"
        if not isinstance(entry, dict):
            raise ManifestError(f"{where}: must be a table")
        unknown = sorted(set(entry) - MODEL_KEYS)
        if unknown:
            raise ManifestError(
                f"{where}: unknown key {unknown[0]!r} (known: {sorted(MODEL_KEYS)})"
            )
        ts: tuple[str | None, ...] = defaults.targets
        if "targets" in entry:
            ts = tuple(_target_spec(t, base) for t in _strings(entry["targets"], "targets", where))
        policies = defaults.policies
        if "policies" in entry:
            policies = _strings(entry["policies"], "policies", where)
        references = defaults.references
        if "references" in entry:
            references = _strings(entry["references"], "references", where)
        for model in _model_paths(entry, base, where):
            label = _label(model, base)
            for t in ts:
                if t not in targets:
                    try:
                        targets[t] = str(getattr(resolve_target(t), "name", t or "default"))
                    except (BadInput, ValueError, OSError) as e:
                        raise ManifestError(f"{where}: target {t}: {e}") from None
                for pol in policies:
                    try:
                        policy = str(parse_policy(pol))
                    except Exception as e:  # argparse.ArgumentTypeError
                        raise ManifestError(f"{where}: policy {pol!r}: {e}") from None
                    for ref in references:
                        try:
                            resolve_reference_option(ref)
                        except UsageError as e:
                            raise ManifestError(f"{where}: {e}") from None
                        spec = TaskSpec(str(model), label, t, targets[t], policy, ref)
                        out.setdefault(spec.key, spec)
    return list(out.values())


def _label(model: Path, base: Path) -> str:
    try:
        return model.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return model.as_posix()
