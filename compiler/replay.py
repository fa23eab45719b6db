"""Old path of `compiler.regress.replay`, kept for replay tests emitted before the move."""

from compiler.regress.replay import (
    Case,
    check_compiled,
    check_original,
    compile_case,
    diverges_here,
    load_case,
    matching_site,
    max_abs_diff,
    profile_of,
    run_program,
)

__all__ = [
    "Case",
    "check_compiled",
    "check_original",
    "compile_case",
    "diverges_here",
    "load_case",
    "matching_site",
    "max_abs_diff",
    "profile_of",
    "run_program",
]
