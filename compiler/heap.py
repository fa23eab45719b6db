"""Giving the C heap's free pages back to the operating system between phases.

ONNX Runtime's sessions (the unary regions' position check creates and drops several per
model) and the ONNX protos allocate through the C library's `malloc`; when they are freed,
glibc keeps most of those pages mapped (only the top of the main heap is trimmed by itself),
and Python's own allocator takes its arenas from fresh mappings rather than from those
holes. So a freed session's tens of megabytes stayed in the process's resident set, under
everything the later passes allocate: `prover check` on efficientnet_b0 per channel peaked
at 246 or 278 MB from one run to the next, depending on where the sessions' memory had
landed. `malloc_trim(0)` returns every whole free page (glibc >= 2.8 also releases the
middle of the heap), which makes the peak the same from run to run.

Elsewhere (musl, macOS, Windows) `release` does nothing.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def _trim() -> Any:
    """glibc's `malloc_trim` (looked up among the symbols the process has loaded: no
    search for the library file), or None where the C library has none."""
    import ctypes  # here: the check's start-up does not pay for it

    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def release() -> bool:
    """Return the C heap's free pages to the OS; True if the C library could be asked."""
    fn = _trim()
    if fn is None:
        return False
    fn(0)
    return True
