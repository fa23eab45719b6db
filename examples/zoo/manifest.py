"""The zoo manifest (`manifest.toml` in the output directory): one entry per model file."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

NAME = "manifest.toml"


@dataclass(frozen=True)
class Entry:
    """One model of the zoo."""

    file: str
    arch: str
    family: str
    variant: str
    note: str


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write(directory: Path, entries: list[Entry], header: dict[str, str]) -> Path:
    """Write `directory/manifest.toml` (entries sorted by file name)."""
    lines = ["# written by examples/zoo/build.py; one [[model]] per file"]
    lines += [f"{k} = {_q(v)}" for k, v in header.items()]
    for e in sorted(entries, key=lambda e: e.file):
        lines += [
            "",
            "[[model]]",
            f"file = {_q(e.file)}",
            f"arch = {_q(e.arch)}",
            f"family = {_q(e.family)}",
            f"variant = {_q(e.variant)}",
            f"note = {_q(e.note)}",
        ]
    path = directory / NAME
    path.write_text("\n".join(lines) + "\n")
    return path


def read(directory: Path) -> list[Entry]:
    """The entries of `directory/manifest.toml` (FileNotFoundError if there is none)."""
    data = tomllib.loads((directory / NAME).read_text())
    return [Entry(**m) for m in data.get("model", [])]
