"""The scheduler's child processes and the queues between them.

Verifier and workers are spawned processes (never forked: CUDA does not survive a fork),
each with its own log file. ``Inbox.wait`` takes the message a stage wants, watching the
processes it depends on, so a crash or a hang ends the wait with ("dead" | "timeout" |
"refused", process) instead of blocking the run.

Solution code runs in its worker, so whatever a worker sends is untrusted: every worker
has its own queues (nothing it can reach carries another process's messages), and what
it sends is unpickled with only the globals a tensor needs (``GuardedQueue``), so a
message cannot run code where it is read.
"""

from __future__ import annotations

import importlib
import io
import pickle
import queue
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp

context = mp.get_context("spawn")

# What a worker's tensors are rebuilt with on the other side (torch's own reductions).
_REBUILDS = {
    "rebuild_tensor",
    "rebuild_cuda_tensor",
    "rebuild_storage_fd",
    "rebuild_storage_filename",
    "rebuild_storage_empty",
    "rebuild_typed_storage",
    "rebuild_typed_storage_child",
    "rebuild_event",
}
_STORAGES = (torch.UntypedStorage, torch.storage.TypedStorage)


def tensor_globals(module: str, name: str) -> bool:
    """Admit the globals of dense tensors sent between processes, and nothing else."""
    if module == "torch.multiprocessing.reductions":
        return name in _REBUILDS
    if module == "multiprocessing.resource_sharer":
        return name == "DupFd"
    if module in ("torch", "torch.storage", "torch.cuda") and not name.startswith("_"):
        value = getattr(importlib.import_module(module), name, None)
        return (
            value in (torch.Tensor, torch.Size, torch.device)
            or isinstance(value, torch.dtype)
            or (isinstance(value, type) and issubclass(value, _STORAGES))
        )
    return False


def no_globals(module: str, name: str) -> bool:
    return False


class _Restricted(pickle.Unpickler):
    def __init__(self, data: bytes, allow: Callable[[str, str], bool]):
        super().__init__(io.BytesIO(data))
        self.allow = allow

    def find_class(self, module: str, name: str) -> Any:
        if not self.allow(module, name):
            raise pickle.UnpicklingError(f"refused {module}.{name}")
        return super().find_class(module, name)


_NONE = pickle.dumps(None)


class GuardedQueue(Queue):
    """A queue whose reader unpickles each message with only the globals ``allow`` admits;
    a message that needs another raises pickle.UnpicklingError from ``get``."""

    def __init__(self, allow: Callable[[str, str], bool]):
        self.allow = allow
        super().__init__(ctx=context)

    def __getstate__(self):
        return (*super().__getstate__(), self.allow)

    def __setstate__(self, state):
        self.allow = state[-1]
        super().__setstate__(state[:-1])

    def _reset(self, *args, **kwargs):
        super()._reset(*args, **kwargs)
        receive = self._recv_bytes
        self._received = None

        def guarded() -> bytes:
            self._received = _Restricted(receive(), self.allow).load()
            return _NONE  # what Queue.get unpickles itself; the message is in _received

        self._recv_bytes = guarded

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        super().get(block, timeout)
        received, self._received = self._received, None
        return received


@dataclass
class Process:
    process: Any
    log: Path
    commands: Any = None  # the queue it reads commands from (workers)
    loaded: dict | None = None  # a worker's answer to loading its solution
    inbox: Inbox | None = None  # what a worker sends the scheduler
    refusal: str = ""  # why its last message was refused


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
    if kind == "refused":
        return f"sent a message the judge refuses ({handle.refusal})"
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
            except pickle.UnpicklingError as error:  # only a worker's inbox refuses
                watch[0].refusal = str(error)
                return ("refused", watch[0])
            if wanted(message):
                return message
            if "case_id" in message:
                # The verifier's answer can overtake the worker's message of the same stage:
                # keep it for the wait that wants it.
                self.early.append(message)
