"""Fresh input values for timed calls, that no solution can know or precompute.

For each floating input of a workload the referee draws, once per workload, a secret
*pool*: ``n + span`` values, each a random convex mix of two of the input's own values
(so every value stays within the range of the real ones), and as many secret random
*bits*. A timed call's input is a *window*: three secret offsets, ``first``, ``second``
and ``chooser``, and element ``i`` is ``pool[first + i]`` where ``bits[chooser + i]`` is 1,
else ``pool[second + i]``; it is written into the worker's input set just before the
sample runs. Windows of different offsets hold different values almost everywhere (a
remembered or stale answer fails), and the reference of any window can be computed, so
any timed call can be checked after the fact. Integer and bool inputs (indices, page
tables, packed weights, scale bytes) and scalars keep their real values.

Why three offsets (the red team's finding at 99ea315): windows that were plain slices of
the pool, ``pool[offset : offset + n]``, were ``span + 1`` inputs in all (4,097 for the
grouped GEMMs' decode activations), and a call's values showed most of the pool: a
solution placed the windows it saw in the untimed calls, computed every window's answer in
its untimed ``prepare`` and answered the timed calls from that table, 270 times faster than
the same math, every check passed. Now there are ``(span + 1)^3`` windows, none a slice of
another, and since element ``i`` is the product of a bit and a pool value at two secret
offsets, even an operator linear in the input (a GEMM) would need a table over every pair
of offsets, ``(n + span)^2`` vectors of outputs: with ``span`` at least MIN_SPAN (65,536),
over 4 * 10^9 of them for the smallest input, out of any memory and any time limit.
"""

from __future__ import annotations

import os
import random
import secrets
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from . import windows
from .windows import Window

Call = dict[int, Window]  # the windows of one call, by the index of their input

CHUNK = 1 << 24  # pool elements drawn at a time (bounds the float32 temporaries)
# On the CPU, small windows are gathered at most this many bytes of sets at a time (each
# of the three offsets' values is gathered into a temporary first)
GATHER_BYTES = 1 << 26
MIN_SPAN = 1 << 16  # (see the docstring: 4,096 let a GEMM's pairs of offsets be tabulated)
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
    """The secret pools and bits of one workload's floating inputs, on the referee's device."""

    pristine: list[Any]
    pools: dict[int, torch.Tensor] = field(default_factory=dict)
    bits: dict[int, torch.Tensor] = field(default_factory=dict)
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
            self.bits[index] = torch.randint(
                0, 2, (count + span,), generator=generator, dtype=torch.uint8, device=value.device
            )
            self.spans[index] = span

    def draw(self, count: int) -> list[Call]:
        """``count`` new windows: three secret offsets per floating input each, from one
        read of the system's randomness (a read per offset, ``random.SystemRandom``, took
        20.7 ms for 4,000 windows of two inputs on the CI machine, and on the H200 the
        referee's time between a sample's reply and the next sample of a 4,000-call graph
        was 55 ms where the gap is 20: case-breakdown.md, twentieth session). Each offset is
        a 64-bit draw modulo the span: no offset is likelier than another by more than
        span / 2^64. (4,000 windows of three inputs, three offsets each: 3.7-5.3 ms on the
        CI machine, benchmarks/window_draws.py.)"""
        spans = list(self.spans.items())
        if not spans:
            return [{} for _ in range(count)]
        moduli = np.array([span + 1 for _, span in spans], dtype=np.uint64)[:, None]
        raw = np.frombuffer(os.urandom(24 * count * len(spans)), dtype="<u8")
        drawn = raw.reshape(count, len(spans), 3) % moduli
        rows = drawn.tolist()
        return [{index: tuple(row[at]) for at, (index, _) in enumerate(spans)} for row in rows]

    def large(self, index: int) -> bool:
        """Whether windows of input ``index`` are large enough to be written one by one."""
        value = self.pristine[index]
        return value.numel() * value.element_size() >= COPY_BYTES

    def gather(self, index: int, chosen: list[Window], out: torch.Tensor) -> None:
        """Write the windows ``chosen`` of input ``index`` into ``out[0..]``: on CUDA one
        kernel for all of them; on the CPU one at a time when they are large, else a few
        indexing operations for many of them at once."""
        count = self.pristine[index].numel()
        pool, bits = self.pools[index], self.bits[index]
        rows = out.view(len(chosen), count)
        if rows.is_cuda:  # one kernel for every window, whatever its size (windows.py)
            windows.gather(pool, bits, chosen, rows)
            return
        windows.check(pool, bits, chosen, count)
        if self.large(index):
            for row, (first, second, chooser) in zip(rows, chosen, strict=True):
                pick = bits[chooser : chooser + count].view(torch.bool)
                torch.where(
                    pick, pool[first : first + count], pool[second : second + count], out=row
                )
            return
        every = pool.unfold(0, count, 1)  # every slice, without a copy
        picks = bits.view(torch.bool).unfold(0, count, 1)
        step = max(1, GATHER_BYTES // max(1, count * pool.element_size()))
        for start in range(0, len(chosen), step):
            part = torch.tensor(chosen[start : start + step], dtype=torch.long)
            one, two = every.index_select(0, part[:, 0]), every.index_select(0, part[:, 1])
            torch.where(picks.index_select(0, part[:, 2]), one, two, out=rows[start : start + step])

    def window(self, index: int, chosen: Window) -> torch.Tensor:
        """The values of window ``chosen`` of input ``index``, as the sets get them."""
        value = self.pristine[index]
        out = torch.empty((1, value.numel()), dtype=value.dtype, device=value.device)
        self.gather(index, [chosen], out)
        return out.view(value.shape)

    def differ(self, index: int, chosen: list[Window], rows: torch.Tensor) -> torch.Tensor:
        """CUDA: a device bool, whether any of ``rows`` differs in any byte from its window
        (one kernel, windows.py)."""
        return windows.differ(self.pools[index], self.bits[index], chosen, rows)

    def inputs(self, chosen: Call) -> list[Any]:
        """The inputs of a call whose windows are ``chosen``."""
        return [
            self.window(index, chosen[index]) if index in chosen else value
            for index, value in enumerate(self.pristine)
        ]
