"""Where a case's seconds go: named spans, summed, for the row's ``breakdown``.

The referee times its own steps (materializing the inputs, the reference, starting the
worker, the checked call, the device load before timing, sizing, the samples, the
checks); the lane adds the start of the referee process (``referee``, on the first case
of a lane and after a referee died) and the rest of the case's wall time as ``other``
(messages between the processes, rows written). Read with ``scripts/case_breakdown.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Stopwatch:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - started

    def rounded(self) -> dict[str, float]:
        return {name: round(value, 3) for name, value in self.seconds.items()}


def with_other(parts: dict[str, float], total: float) -> dict[str, float]:
    """``parts`` and ``other``: what of ``total`` they do not account for."""
    return {**parts, "other": round(max(0.0, total - sum(parts.values())), 3)}
