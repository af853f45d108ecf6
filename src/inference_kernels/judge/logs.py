"""Referee processes write what they print (Python and native) to a log file,
whose tail goes into a row when the process dies."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def redirect_output(log: Path) -> None:
    """Send this process's stdout and stderr, file descriptors 1 and 2 included, to ``log``."""
    handle = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(handle, 1)
    os.dup2(handle, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
