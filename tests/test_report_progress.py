"""The progress bar draws only on a terminal and only after a moment of work."""

from __future__ import annotations

import io
import time

from compiler.progress import Progress


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_bar_when_not_a_terminal():
    s = io.StringIO()
    with Progress("checking", stream=s, delay_s=0.0) as p:
        p.update(1, 2)
        time.sleep(0.15)
    assert s.getvalue() == ""


def test_no_bar_for_short_work_on_a_terminal():
    s = FakeTty()
    with Progress("checking", stream=s, delay_s=5.0):
        pass
    assert s.getvalue() == ""


def test_bar_on_a_terminal_after_the_delay():
    s = FakeTty()
    with Progress("checking", stream=s, delay_s=0.01) as p:
        p.update(3, 4)
        time.sleep(0.25)
    out = s.getvalue()
    assert "checking [" in out and "3/4" in out
    assert out.endswith("\r\x1b[K")  # the line is erased at the end


def test_spinner_without_totals():
    p = Progress("checking", stream=io.StringIO(), enabled=False)
    with p:
        assert "checking" in p.line() and "[" not in p.line()
