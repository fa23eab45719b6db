"""The files a command writes, one rule for both tools (`prover check -o`, `npuc compile
--report/-o/--onnx-out`):

- a report's format is `--format` when given, else its file's extension (`SUFFIXES`); an
  extension that names no format is bad usage (exit 2), as is a file without one;
- every destination is checked before any work (not a directory, its parent not a file);
  a missing parent directory is created, and the "wrote" line says so;
- the files of one run are written together or not at all (`Staged`: each to a temporary
  file beside it, then renamed into place), so a failure leaves nothing half written;
- each file written is named on a "wrote FILE" line.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from compiler.cli.common import UsageError

SUFFIXES = {
    ".txt": "text",
    ".text": "text",
    ".json": "json",
    ".sarif": "sarif",
    ".xml": "junit",
    ".html": "html",
    ".htm": "html",
    ".md": "markdown",
}
FORMATS = ("github", "html", "json", "junit", "markdown", "sarif", "text")  # github: no extension


def suffix_format(path: str) -> str | None:
    """The format a file name's extension names (".sarif.json" is SARIF), else None."""
    name = Path(path).name.lower()
    if name.endswith(".sarif.json"):
        return "sarif"
    return SUFFIXES.get(Path(name).suffix)


def report_format(
    fmt: str | None, path: str | None, option: str, default: str | None
) -> str | None:
    """The report format: `fmt` (--format) when given, else from `path`'s extension, else
    `default` when there is no file (stdout). An unknown extension is a `UsageError`."""
    if fmt is not None:
        return fmt
    if path is None or path == "-":
        return default
    got = suffix_format(path)
    if got is None:
        known = ", ".join(sorted(SUFFIXES))
        suffix = Path(path).suffix or "(none)"
        raise UsageError(
            f"{option} {path}: extension {suffix} names no report format (known: {known}); "
            "give --format"
        )
    return got


def check_destination(path: str | None, option: str) -> None:
    """Bad usage, before any work, when `path` cannot be a file to write: a directory, a
    path under a regular file, or a file or directory not writable."""
    if path is None or path == "-":
        return
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{option} is a directory, not a file: {path}")
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"{option} {path}: {parent} is not a directory")
    target = p if p.exists() else parent
    if not os.access(target, os.W_OK):
        raise UsageError(f"{option} {path}: not writable ({target})")


def render_report(
    fmt: str,
    run: Any,
    indent: int | None = None,
    extra: dict[str, Any] | None = None,
    progress: bool = True,
    verbose: bool = False,
) -> str:
    """The report of a `compiler.cli.check_run.CheckRun` in `fmt`; `extra`: keys added to a
    JSON report (e.g. npuc's "program"); an HTML report shows a progress bar while drawn
    (on a terminal, `progress` True); `verbose`: the text report's -v form."""
    if fmt == "html":
        from compiler.report import html as report_html
        from compiler.report.progress import Progress

        with Progress("rendering report", enabled=None if progress else False) as bar:
            return report_html.render(run, bar.update)
    if fmt == "json":
        from compiler.report import json_form as report_json

        if not extra:
            return report_json.render(run.report, indent)
        data = report_json.report_json(run.report)
        data.update(extra)
        return report_json.dumps(data, indent)
    if fmt == "text":
        from compiler.report import text as report_text

        return report_text.render(run.report, verbose)
    import importlib

    return str(importlib.import_module(f"compiler.report.{fmt}").render(run.report))


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


def write_output(
    text: str,
    output: str | None,
    prog: str,
    what: str,
    also: Sequence[tuple[str, str, str | None]] = (),
) -> None:
    """A report to stdout (`output` None or "-"), else to its file, and the reports `also`
    ((file, text, format)) to theirs, the files all written or none (`Staged`), each named
    on stderr ("<prog>: wrote FILE (what, size)")."""
    import sys

    st = Staged()
    if output is None or output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        st.add(output, text, what)
    for path, body, fmt in also:
        st.add(path, body, f"{fmt} report")
    st.commit(lambda line: print(f"{prog}: {line}", file=sys.stderr))


def _size(n: int) -> str:
    return (
        f"{n} bytes"
        if n < 10_000
        else f"{n / 1000:,.0f} kB"
        if n < 10_000_000
        else f"{n / 1e6:,.1f} MB"
    )


class Staged:
    """Files written together or not at all: `add` them, then `commit`."""

    def __init__(self) -> None:
        self.files: list[tuple[Path, bytes | Callable[[BinaryIO], None], str]] = []

    def add(
        self, path: str | Path, data: bytes | str | Callable[[BinaryIO], None], what: str
    ) -> None:
        """Stage `data` (text is UTF-8; a callable writes the file's bytes to the binary file
        it is given, at commit, so a large file is never whole in memory) for `path`; `what`
        names it on the wrote line."""
        raw = data.encode("utf-8") if isinstance(data, str) else data
        self.files.append((Path(path), raw, what))

    def commit(self, emit: Callable[[str], None] | None = None) -> list[str]:
        """Write every staged file (each to a temporary file beside it, then all renamed
        into place); on failure remove what was written and re-raise. Returns (and passes
        to `emit`) one "wrote FILE (what, size)" line per file."""
        made: list[Path] = []
        temps: list[tuple[str, Path]] = []
        sizes: dict[Path, int] = {}
        try:
            for path, raw, _ in self.files:
                missing = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
                path.parent.mkdir(parents=True, exist_ok=True)
                made.extend(reversed(missing))
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
                temps.append((tmp, path))
                with os.fdopen(fd, "wb") as f:
                    if callable(raw):
                        raw(f)
                    else:
                        f.write(raw)
                sizes[path] = os.path.getsize(tmp)
                os.chmod(tmp, 0o666 & ~_umask())  # as open() would make it, not mkstemp's 0600
            for tmp, path in temps:
                os.replace(tmp, path)
        except BaseException:
            for tmp, _ in temps:
                Path(tmp).unlink(missing_ok=True)
            for d in reversed(made):  # the directories this commit created, deepest first
                try:
                    d.rmdir()
                except OSError:
                    pass
            raise
        lines = []
        for path, _, what in self.files:
            created = [d for d in made if d in (path.parent, *path.parent.parents)]
            note = f"; created directory {created[0]}" if created else ""
            lines.append(f"wrote {path} ({what}, {_size(sizes[path])}{note})")
        for line in lines:
            if emit is not None:
                emit(line)
        return lines
