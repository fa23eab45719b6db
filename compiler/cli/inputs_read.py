"""What a check read, as it read it: the sha256 of the model, target and external-data bytes.

A run record is keyed by these digests, taken from the very bytes the check parsed, never
from a second read when the record is saved: a file changed (or a FIFO fed other bytes)
between the check and the save must not leave the old report under the new bytes' key.
Imports nothing heavy: `run_record.serve` uses `external_on_disk` at start-up.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class InputsRead:
    """Digests of a check's inputs, filled in as they are read.

    `model`: sha256 of the model file's bytes. `target`: "default", "name:N" (a shipped
    target, part of the tool fingerprint) or "file:SHA" of the target file's bytes.
    `external`: per external-data file (as the model names it), the byte ranges its
    tensors were read from and a digest of the bytes read (`external_digest`)."""

    model: str | None = None
    target: str | None = None
    external: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add_external(self, location: str, offset: int, to_end: bool, data: bytes) -> None:
        """Note one tensor's bytes read from `location` at `offset` (`to_end`: the model
        gives no length, so the read ran to the end of the file)."""
        entry = self.external.setdefault(location, {"ranges": [], "chunks": []})
        entry["ranges"].append([offset, len(data), to_end])
        entry["chunks"].append(sha256(data))

    def external_record(self) -> dict[str, dict[str, Any]] | None:
        """The `external` entry of a run record (None when the model has no side files)."""
        if not self.external:
            return None
        return {
            loc: {"ranges": e["ranges"], "sha256": external_digest(e["ranges"], e["chunks"])}
            for loc, e in sorted(self.external.items())
        }


def external_digest(ranges: list[list[Any]], chunks: list[str]) -> str:
    """One digest of the ranges read from a file and the sha256 of each range's bytes."""
    text = "".join(
        f"{o}:{n}:{int(bool(e))}:{c}\n" for (o, n, e), c in zip(ranges, chunks, strict=True)
    )
    return sha256(text.encode())


def external_on_disk(model: Path, stored: Any) -> str | None:
    """Why the external-data files of `model` no longer hold the bytes of a run record's
    `external` entry (None: every range reads the same bytes now)."""
    if not isinstance(stored, dict):
        return "the record's external-data entry is malformed"
    for loc, entry in stored.items():
        path = model.parent / loc
        try:
            ranges = entry["ranges"]
            if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO is read once, by the check
                return f"{loc} is not a regular file"
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                chunks = []
                for offset, length, to_end in ranges:
                    if to_end and size != offset + length:
                        return f"{loc}: other bytes"
                    f.seek(offset)
                    data = f.read(length)
                    if len(data) != length:
                        return f"{loc}: other bytes"
                    chunks.append(sha256(data))
        except FileNotFoundError:
            return f"{loc} is missing"
        except (OSError, KeyError, TypeError, ValueError):
            return f"{loc} cannot be read"
        if external_digest(ranges, chunks) != entry.get("sha256"):
            return f"{loc}: other bytes"
    return None
