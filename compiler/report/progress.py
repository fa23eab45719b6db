"""A progress indicator on stderr, only on a terminal and only after a moment of work.

The delay is 0.5 s, or `$PROVER_PROGRESS_DELAY` seconds. The compiler may report `(done, total)` through `update`; without it the indicator
shows elapsed time. Nothing is drawn when stderr is not a TTY, and nothing at all
when the work ends within `delay_s`.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

DELAY_ENV = "PROVER_PROGRESS_DELAY"


def default_delay() -> float:
    """Seconds of work before a bar appears: 0.5, or $PROVER_PROGRESS_DELAY."""
    try:
        return max(0.0, float(os.environ.get(DELAY_ENV, "0.5")))
    except ValueError:
        return 0.5


class Progress:
    """Context manager drawing a one-line bar on `stream` from a background thread."""

    def __init__(
        self,
        label: str,
        stream: TextIO | None = None,
        delay_s: float | None = None,
        enabled: bool | None = None,
        width: int = 30,
    ) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.delay_s = delay_s if delay_s is not None else default_delay()
        self.width = width
        is_tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = is_tty if enabled is None else enabled
        self.done = 0
        self.total = 0
        self.drawn = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def update(self, done: int, total: int) -> None:
        """Record progress: `done` of `total` units finished."""
        self.done, self.total = done, total

    def line(self) -> str:
        """The current bar text (without carriage return)."""
        elapsed = time.monotonic() - self._t0
        if self.total > 0:
            frac = min(1.0, self.done / self.total)
            fill = int(frac * self.width)
            bar = "#" * fill + "-" * (self.width - fill)
            return f"{self.label} [{bar}] {self.done}/{self.total} {elapsed:5.1f}s"
        spin = "|/-\\"[int(elapsed * 4) % 4]
        return f"{self.label} {spin} {elapsed:5.1f}s"

    def _run(self) -> None:
        if self._stop.wait(self.delay_s):
            return
        while not self._stop.is_set():
            self.stream.write("\r" + self.line() + "\x1b[K")
            self.stream.flush()
            self.drawn = True
            self._stop.wait(0.1)

    def __enter__(self) -> Progress:
        self._t0 = time.monotonic()
        if self.enabled:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
