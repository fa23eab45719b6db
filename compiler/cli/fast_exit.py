"""Leave a finished CLI run without tearing the interpreter down.

Freeing every module, ONNX Runtime session and cached table at interpreter exit cost 0.1-0.5
s of CPU per run (bench/README.md, issue 25: a 0.7 s check of a small model spent 0.15 s
there, a refused bert 0.5 s). Once the command has returned its code there is nothing left
to free, so the standard streams are flushed, the `atexit` handlers run (the phase
recorder, logging, worker shutdown), and the process ends. With another thread still
alive the normal exit is taken, so it is joined as before.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def exit_process(code: int | None) -> NoReturn:
    """End the process with `code` (None: 0) after flushing output and running atexit."""
    status = 0 if code is None else int(code)
    if threading.active_count() > 1:
        sys.exit(status)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):  # a closed pipe: let Python report it as usual
        sys.exit(status)
    atexit._run_exitfuncs()
    os._exit(status)
