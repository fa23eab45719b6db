"""Files of a store that many processes share: atomic writes, tolerant listings.

Every file a store holds (proof records, run records, their `.gitignore`) is written by
`write_atomic`: the bytes go to a fresh temporary file in the same directory, which is
then renamed over the destination. A reader therefore sees the old file or the whole new
one, never a part, and concurrent writers of one path leave one whole file. (The data is
not fsync'ed: this guards against killed processes, not against a machine losing power;
a record torn by that fails its digest and is reported as corrupt.) A writer
killed mid-write leaves only its temporary file, which no reader opens (`is_temp`: a
dot-name ending in `.tmp`, never a record's name) and which `remove_stale_temps` deletes
once it is older than any live write can be.

Files are created with mode 0666 & ~umask, like any other file the user writes
(`mkstemp`'s 0600 would lock everyone else out of a shared store).

Another process may delete a file between a listing and a read of it (pruning, a
regenerated store): `FileNotFoundError` then means "already gone", never an error of
the run (`mtimes`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from pathlib import Path

TEMP_SUFFIX = ".tmp"
STALE_TEMP_S = 3600.0  # a write takes milliseconds; a temporary file this old is abandoned
_ATTEMPTS = 3


def temp_name(dest: Path) -> Path:
    """A temporary file name next to `dest`, unique to this writer."""
    return dest.with_name(f".{dest.name}.{os.getpid()}.{secrets.token_hex(6)}{TEMP_SUFFIX}")


def is_temp(name: str) -> bool:
    """Whether `name` is a temporary file of `write_atomic` (never read as a record)."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def write_atomic(dest: Path, data: bytes) -> None:
    """Write `data` to `dest` at once: create a temporary file (mode 0666 & ~umask), write
    it whole, rename it over `dest`. Written again if another process removed the temporary
    file (a writer paused for longer than `STALE_TEMP_S`) or the emptied directory meanwhile."""
    for attempt in range(_ATTEMPTS):
        tmp = temp_name(dest)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, dest)
            return
        except FileNotFoundError:
            _unlink(tmp)
            if attempt == _ATTEMPTS - 1:
                raise
            dest.parent.mkdir(parents=True, exist_ok=True)
        except BaseException:
            _unlink(tmp)
            raise


def _unlink(p: Path) -> None:
    with contextlib.suppress(OSError):  # never written, or not ours to remove: left alone
        os.unlink(p)


def remove_stale_temps(directory: Path, max_age_s: float = STALE_TEMP_S) -> int:
    """Delete the temporary files in `directory` older than `max_age_s` (left by killed
    writers); returns how many. A live writer's file is younger and is left alone."""
    now = time.time()
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return 0
    for e in entries:
        if not is_temp(e.name):
            continue
        try:
            if now - e.stat(follow_symlinks=False).st_mtime < max_age_s:
                continue
            os.unlink(e.path)
            removed += 1
        except FileNotFoundError:
            continue  # another process removed it (or renamed it into place)
    return removed


def mtimes(directory: Path, suffix: str) -> list[tuple[int, Path]]:
    """(mtime in ns, path) of the files in `directory` named `*suffix` (not temporary
    files); a file deleted meanwhile is left out, a missing directory lists nothing."""
    out = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return []
    for e in entries:
        if not e.name.endswith(suffix) or is_temp(e.name):
            continue
        try:
            out.append((e.stat(follow_symlinks=False).st_mtime_ns, Path(e.path)))
        except FileNotFoundError:
            continue
    return out
