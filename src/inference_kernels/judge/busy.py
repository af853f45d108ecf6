"""Keeping the device busy between a lane's cases, in the sustained regime.

A lane judges case after case; between one case's samples and the next case's, the
referee checks outputs, prepares the next workload and starts or thaws a worker: about
a second in which the device would rest. Before, each case paid a load as long as that
rest (0.2-1 s) so that its samples started from the clocks of sustained work: on the
H200 that load was a third of an audit's time (docs/measurements/case-breakdown.md).
Instead the referee keeps the device loaded in the background through that second, and
stops the load for the case's first call, which the solution runs alone (it may tune
itself there); the load comes back once that call is done, while the referee checks its
outputs and the methods are set up (graph captures, warmups), and stops for the samples
that size the schedule, which the solution runs alone too. Right before the timed rounds
it stops for good, and a short steady load follows (as long as the device rested, at
least 0.05 s, when that is less than 0.1 s; else what 0.3 s lack after the load since the
rest: referee.steady_seconds). The device
hardly rests, which is the state the sustained regime names (a busy server); nothing of
the solution is timed beside the load, and nothing of the solution runs between the
steady load and its timed samples.

The load is a chain of bf16 matrix products on a stream of its own, from a thread of the
referee's (the solution's worker is another process: it cannot see or stop it). Each
round of products is about 1.4 ms on the H200, so ``stop()`` returns within about that.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator

import torch

SIZE = 4096  # a product of two SIZE x SIZE bf16 matrices: about 0.17 ms on the H200
ROUND = 8  # products between checks for a stop

Work = Callable[[], Callable[[], None]]  # made in the load's thread: one round per call


class Busy:
    """A background load: rounds of ``work`` (``products(device)`` on CUDA); with no
    work, nothing (another regime, or the CPU)."""

    def __init__(self, work: Work | None = None):
        self.work = work
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.rounds = 0  # rounds run so far, all starts together
        self.error: str | None = None  # why the last load ended by itself

    @property
    def running(self) -> bool:
        """Whether the load runs now: a load whose thread died (its work raised) does not,
        so the referee counts the device as resting since the last samples."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.work is None or self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="busy", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the load; returns when its last round has finished (on the device too)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Stop the load for the block (the referee's own heavy work: a reference), and
        start it again after, if it ran before."""
        was = self.running
        self.stop()
        try:
            yield
        finally:
            if was:
                self.start()

    def _run(self) -> None:
        try:
            one_round = self.work()
            while not self._stop.is_set():
                one_round()
                self.rounds += 1
        except Exception as error:  # the load ends; the referee loads before samples instead
            self.error = f"{type(error).__name__}: {error}"
            print(f"background load stopped: {self.error}", file=sys.stderr, flush=True)


def products(device: torch.device) -> Work:
    """Rounds of ROUND bf16 products on a stream of their own, on ``device``; the stream
    and the two matrices (64 MB) are made at the first start and kept for every later one
    (a lane starts the load several times a case)."""
    kept: list = []

    def make() -> Callable[[], None]:
        torch.cuda.set_device(device)
        if not kept:
            stream = torch.cuda.Stream(device)
            with torch.cuda.stream(stream):
                a = torch.ones(SIZE, SIZE, device=device, dtype=torch.bfloat16)
                kept.extend([stream, a, torch.empty_like(a)])
        stream, a, out = kept

        def one_round() -> None:
            with torch.cuda.stream(stream):
                for _ in range(ROUND):
                    torch.mm(a, a, out=out)
            stream.synchronize()  # releases the GIL while the device works

        return one_round

    return make
