"""Where a case's seconds go: named spans, summed, for the row's ``breakdown``.

The referee times its own steps: materializing the inputs (within it ``prefetch_wait``,
the wait for the helper that makes them ahead, judge/prefetch.py), the ``least_work``
counted on them (dataset/rooflines.py), the reference, starting
the worker, the checked call (the worker's turn; ``call_check`` the referee's reading and
comparing of its outputs and inputs), the device load before timing, sizing, the samples,
the checks; within the sizing and the samples, each method's ``setup`` (prepared launches, a
graph's capture), the ``refresh`` of the input sets with fresh values before each sample,
after it the ``clocks`` (the idle probe, the NVML readings), the ``keep`` (one call's
outputs copied out for the checks) and the ``compare`` of the sets with what was written
into them; within ``end`` (the worker's end of the case), the ``freeze`` of its
processes until its next case. The lane adds the start of the referee process
(``referee``, on the first case of a lane and after a referee died) and the rest of the
case's wall time as ``other`` (messages between the processes, rows written). Read with
``scripts/case_breakdown.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Stopwatch:
    """Spans may nest: an inner span's seconds are its own, and the span around it keeps
    only what its inner spans did not take, so the steps still add up to the wall time
    (the samples' ``setup``, ``refresh`` and ``compare`` inside ``samples`` and ``sizing``)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._inner: list[float] = []  # per open span, the seconds of the spans inside it

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        self._inner.append(0.0)
        try:
            yield
        finally:
            took = time.monotonic() - started
            own = took - self._inner.pop()
            self.seconds[name] = self.seconds.get(name, 0.0) + own
            if self._inner:
                self._inner[-1] += took

    def rounded(self) -> dict[str, float]:
        return {name: round(value, 3) for name, value in self.seconds.items()}


def with_other(parts: dict[str, float], total: float) -> dict[str, float]:
    """``parts`` and ``other``: what of ``total`` they do not account for."""
    return {**parts, "other": round(max(0.0, total - sum(parts.values())), 3)}
