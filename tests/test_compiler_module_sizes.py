"""Small modules: no module of the `compiler` package is over 600 lines (issue 21). A module
growing past it is split by concept (as the frontend's converters are, one module per op
family in compiler/frontend/ops/)."""

from __future__ import annotations

from pathlib import Path

import compiler

LIMIT = 600


def test_no_compiler_module_is_over_600_lines():
    root = Path(compiler.__file__).resolve().parent
    sizes = {p.relative_to(root.parent).as_posix(): len(p.read_text().splitlines())
             for p in root.rglob("*.py")}  # fmt: skip
    assert len(sizes) > 50  # the package itself, not an empty directory
    over = {p: n for p, n in sorted(sizes.items()) if n > LIMIT}
    assert not over, f"modules over {LIMIT} lines: {over}"
