"""Fresh input values for timed calls, that no solution can know or precompute.

For each floating input of a workload the referee draws, once per workload, a secret
*pool*: ``n + span`` values, each a random convex mix of two of the input's own values
(so every value stays within the range of the real ones). A timed call's input is a
*window* of the pool at a secret offset, copied into the worker's input set just before
the sample runs. Windows at different offsets hold different values everywhere (a
remembered or stale answer fails), and the reference of any window can be computed, so
any timed call can be checked after the fact. Integer and bool inputs (indices, page
tables, packed weights, scale bytes) and scalars keep their real values.
"""

from __future__ import annotations

import os
import random
import secrets
import struct
from dataclasses import dataclass, field
from typing import Any

import torch

from . import windows

CHUNK = 1 << 24  # pool elements drawn at a time (bounds the float32 temporaries)
MIN_SPAN = 4096
# On the CPU, windows of at least this many bytes are copied one by one; smaller ones are
# gathered for all sets in one indexing operation over an overlapping view of the pool. (On
# CUDA both were slow, launches or index arithmetic: windows.py does it in one kernel.)
COPY_BYTES = 1 << 20


def floating(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() > 0


def _pool(value: torch.Tensor, span: int, generator: torch.Generator, shift: int) -> torch.Tensor:
    flat = value.reshape(-1)
    count = flat.numel()
    pool = torch.empty(count + span, dtype=value.dtype, device=value.device)
    for start in range(0, pool.numel(), CHUNK):
        stop = min(pool.numel(), start + CHUNK)
        index = torch.arange(start, stop, device=value.device) % count
        first = flat[index].float()
        second = flat[(index + shift) % count].float()
        weight = torch.rand(stop - start, generator=generator, device=value.device)
        pool[start:stop] = (first + weight * (second - first)).to(value.dtype)
    return pool


@dataclass
class Fresh:
    """The secret pools of one workload's floating inputs, on the referee's device."""

    pristine: list[Any]
    pools: dict[int, torch.Tensor] = field(default_factory=dict)
    spans: dict[int, int] = field(default_factory=dict)
    _random: random.SystemRandom = field(default_factory=random.SystemRandom)

    def __post_init__(self) -> None:
        for index, value in enumerate(self.pristine):
            if not floating(value):
                continue
            count = value.numel()
            span = max(count // 4, MIN_SPAN)
            generator = torch.Generator(device=value.device)
            generator.manual_seed(secrets.randbits(63))
            shift = self._random.randrange(1, count) if count > 1 else 0
            self.pools[index] = _pool(value, span, generator, shift)
            self.spans[index] = span

    def draw(self, count: int) -> list[dict[int, int]]:
        """``count`` new windows: a secret offset per floating input each, from one read of
        the system's randomness (a read per offset, ``random.SystemRandom``, took 20.7 ms
        for 4,000 windows of two inputs on the CI machine, and on the H200 the referee's
        time between a sample's reply and the next sample of a 4,000-call graph was 55 ms
        where the gap is 20: case-breakdown.md, twentieth session). Each offset is a 64-bit
        draw modulo the span: no offset is likelier than another by more than span / 2^64."""
        spans = list(self.spans.items())
        if not spans:
            return [{} for _ in range(count)]
        drawn = struct.unpack(f"<{count * len(spans)}Q", os.urandom(8 * count * len(spans)))
        values = iter(drawn)
        return [{index: next(values) % (span + 1) for index, span in spans} for _ in range(count)]

    def large(self, index: int) -> bool:
        """Whether windows of input ``index`` are large enough to be copied one by one."""
        value = self.pristine[index]
        return value.numel() * value.element_size() >= COPY_BYTES

    def gather(self, index: int, offsets: list[int], out: torch.Tensor) -> None:
        """Write the windows at ``offsets`` of input ``index`` into ``out[0..]``: on CUDA
        one kernel for all of them; on the CPU a copy each when they are large, else one
        indexing operation for all of them."""
        count = self.pristine[index].numel()
        rows = out.view(len(offsets), count)
        if rows.is_cuda:  # one kernel for every window, whatever its size (windows.py)
            windows.gather(self.pools[index], offsets, rows)
            return
        if self.large(index):
            pool = self.pools[index]
            for row, offset in zip(rows, offsets, strict=True):
                row.copy_(pool[offset : offset + count])
            return
        every = self.pools[index].unfold(0, count, 1)  # every window, without a copy
        chosen = torch.tensor(offsets, dtype=torch.long, device=every.device)
        torch.index_select(every, 0, chosen, out=rows)

    def window(self, index: int, offset: int) -> torch.Tensor:
        value = self.pristine[index]
        return self.pools[index][offset : offset + value.numel()].view(value.shape)

    def inputs(self, offsets: dict[int, int]) -> list[Any]:
        """The inputs of a call whose window is ``offsets``."""
        return [
            self.window(index, offsets[index]) if index in offsets else value
            for index, value in enumerate(self.pristine)
        ]
