"""`compiler.heap.release`: freed C-heap pages leave the resident set (on glibc)."""

from __future__ import annotations

import platform

import numpy as np
import pytest

from compiler import heap


def _rss_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc/self/status")
def test_freed_holes_in_the_heap_are_returned():
    if heap._trim() is None:
        pytest.skip("the C library has no malloc_trim (not glibc)")
    # 96 MB of 48 KiB blocks (below glibc's mmap threshold: they live in the heap), every
    # block but the last freed: the heap's top stays in use, so glibc cannot trim by itself
    blocks = [np.ones(6144) for _ in range(2048)]
    keep = blocks[-1]
    before = _rss_kb()
    del blocks
    held = _rss_kb()
    assert heap.release() is True
    after = _rss_kb()
    assert keep.sum() == 6144
    assert before - held < 48 * 1024, "glibc returned the holes by itself: the test shows nothing"
    assert held - after > 48 * 1024, (before, held, after)
