"""The progress bar draws only on a terminal and only after a moment of work."""

from __future__ import annotations

import io
import time

import pytest

from compiler.report.progress import Progress


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


@pytest.mark.slow  # the default run keeps a fast sample of this group (README: test time)
def test_real_command_draws_on_a_terminal_only():
    """`prover check` with stderr on a pseudo-terminal draws the bar; with a pipe it does not."""
    import os
    import pty
    import subprocess
    import sys

    from cli_helpers import EXAMPLES, REPO

    cmd = [sys.executable, "-m", "compiler.cli.prover", "check", str(EXAMPLES / "showcase.onnx")]
    cmd += ["--proofs-mode", "off"]
    env = dict(os.environ, PROVER_PROGRESS_DELAY="0")
    master, slave = pty.openpty()
    try:
        r = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=slave, cwd=REPO, env=env, timeout=120
        )
    finally:
        os.close(slave)
    data = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    os.close(master)
    assert r.returncode == 1
    assert b"checking" in data and b"\x1b[K" in data
    assert b"checking" not in r.stdout  # the report itself never contains the bar
    piped = subprocess.run(cmd, capture_output=True, cwd=REPO, env=env, timeout=120)
    assert piped.returncode == 1 and piped.stderr == b""
