"""The scheduler's child processes and the queue they answer on.

Verifier and workers are spawned processes (never forked: CUDA does not survive a fork),
each with its own log file. They all answer on one results queue; ``Inbox.wait`` takes
the message a stage wants, watching the processes it depends on, so a crash or a hang
ends the wait with ("dead" | "timeout", process) instead of blocking the run.
"""

from __future__ import annotations

import queue
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.multiprocessing as mp

context = mp.get_context("spawn")


@dataclass
class Process:
    process: Any
    log: Path
    commands: Any = None  # the queue it reads commands from (workers)
    loaded: dict | None = None  # a worker's answer to loading its solution


def spawn(target: Callable, args: tuple, log: Path, commands: Any = None) -> Process:
    process = context.Process(target=target, daemon=True, args=(*args, str(log)))
    process.start()
    return Process(process, log, commands)


def stop(handle: Process | None) -> None:
    """Kill ``handle``'s process if it still runs, and reap it."""
    if handle is None:
        return
    if handle.process.is_alive():
        handle.process.kill()
    handle.process.join(timeout=10)


def _death(process) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def _log_tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:] if line.strip())[:800]


def failure(outcome: tuple[str, Process], timeout: float) -> str:
    """One line for a wait that ended without its message: the hang or the death, and the
    end of the process's log."""
    kind, handle = outcome
    if kind == "timeout":
        return f"no answer within {timeout:.0f} s"
    tail = _log_tail(handle.log)
    return f"process {_death(handle.process)}" + (f"; log: {tail}" if tail else "")


@dataclass
class Inbox:
    """The results queue, and case messages that arrived before their wait."""

    results: Any = field(default_factory=lambda: context.Queue())
    early: list[dict] = field(default_factory=list)

    def wait(self, wanted: Callable[[dict], bool], seconds: float, watch: list[Process]):
        """The first message ``wanted`` accepts, or ("timeout"|"dead", process)."""
        for index, early in enumerate(self.early):
            if wanted(early):
                return self.early.pop(index)
        deadline = time.monotonic() + seconds
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return ("timeout", watch[0])
            try:
                message = self.results.get(timeout=min(0.5, remaining))
            except queue.Empty:
                for handle in watch:
                    if not handle.process.is_alive():
                        return ("dead", handle)
                continue
            if wanted(message):
                return message
            if "case_id" in message:
                # The verifier's answer can overtake the worker's message of the same stage:
                # keep it for the wait that wants it.
                self.early.append(message)
