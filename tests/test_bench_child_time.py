"""bench/child_time.py: the child-process CPU/wall helper the bench scripts share."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from child_time import repeat_child, run_child  # noqa: E402

BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass"


def test_child_cpu_is_counted_and_sleep_is_not():
    """A child spinning 0.2 s of CPU is measured as at least that; a sleeping one is not."""
    busy = run_child([sys.executable, "-c", BUSY])
    assert busy.cpu_s >= 0.19 and busy.wall_s >= busy.cpu_s * 0.5
    idle = run_child([sys.executable, "-c", "import time; time.sleep(0.3)"])
    assert idle.wall_s >= 0.3 and idle.cpu_s < 0.2


def test_output_captured_and_repeat_runs_each_time():
    runs = repeat_child([sys.executable, "-c", "print('x')"], 2, text=True)
    assert [r.proc.stdout for r in runs] == ["x\n", "x\n"]
    assert len(repeat_child([sys.executable, "-c", "pass"], 0)) == 1


def test_failing_child_exits_with_one_line():
    argv = [sys.executable, "-c", "import sys; sys.exit('boom')"]
    with pytest.raises(SystemExit) as e:
        run_child(argv)
    assert str(e.value).endswith("exited 1: boom") and "\n" not in str(e.value)
    assert run_child(argv, ok=(0, 1)).proc.returncode == 1
