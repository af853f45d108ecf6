"""Python's cyclic garbage collector kept out of the judge's timed and set-up paths.

A referee holds torch's heap (about 280,000 objects with the dataset loaded), and a full
collection walks all of it: on the CI machine, decoding and validating a worker's
``ready`` that names a 4,000-call graph's outputs took 18-48 ms, and 126-230 ms in half
the tries, where a full collection (105-189 ms) fell in it; 16-34 ms with the collector
frozen and paused (``benchmarks/collector_pause.py``, nineteenth session). On the H200 the
setup of such graphs grew 0.18 s a case when their outputs came to be named there.
Where a collection falls is not the solution's doing, yet the referee's time of a sample
includes it, and so does the rest of the device between samples.

So each process freezes what it has made before its first case (``freeze``: the imports,
torch, a worker's solution; a full collection then walks only what came after), the
referee judges each case with the collector paused (``paused``), and a worker sets up each
method and runs each sample paused, its reply sent before the collection due. Once a case
is over, its exception (if it ended one) dropped, the referee collects what it left
(``young``: made while nothing was collected, it is in the younger generations) before the
collector resumes and the background load comes back, so that no cycle keeps a case's
device memory from the next one.

Frozen objects are out of ``gc.get_objects()`` too: nothing to rely on against a solution,
which finds its worker on the stack that calls it (the attacks in ``tests/`` do).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


def freeze() -> None:
    """Collect once, then leave every object alive now out of all later collections."""
    gc.collect()
    gc.freeze()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No automatic collection in the block; the collector's state before it after."""
    was = gc.isenabled()
    try:
        gc.disable()
        yield
    finally:
        if was:
            gc.enable()


def young() -> None:
    """Collect the two younger generations: what was made since the last collections (a
    paused case's objects), not the heap that survived before it."""
    gc.collect(1)
