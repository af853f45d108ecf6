"""Python's cyclic garbage collector kept out of the judge's timed and set-up paths.

A referee holds torch's heap (about 290,000 objects with the dataset loaded), and a full
collection walks all of it: on the CI machine, decoding and validating a message that
names a 4,000-call graph's outputs took 18-23 ms, and 105-176 ms in every other try where
a full collection fell in it (a worker's ``ready``, nineteenth session). On the H200 the
setup of such graphs grew 0.18 s a case when their outputs came to be named there.
Where a collection falls is not the solution's doing, yet the referee's time of a sample
includes it, and so does the rest of the device between samples.

So each process freezes what it has made before its first case (``freeze``: the imports,
torch, a worker's solution; a full collection then walks only what came after), and the
referee judges each case, the worker sets up and runs each sample, with the collector
paused (``paused``); collections resume between cases, while the referee's background
load runs. A case's cyclic garbage waits until then.
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
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
