"""The repository's own text files: no merge-conflict markers left behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKERS = ("<<<<<<< ", ">>>>>>> ")
TEXT = (".py", ".md", ".toml", ".yml", ".yaml", ".json", ".txt", ".html", ".cfg")


def test_no_conflict_markers_in_tracked_text_files() -> None:
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    bad = []
    for name in files:
        if not name.endswith(TEXT) or not (ROOT / name).is_file():
            continue
        for k, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1):
            if line.startswith(MARKERS) or line == "=======":
                bad.append(f"{name}:{k}")
    assert not bad, f"merge-conflict markers: {bad[:10]}"
