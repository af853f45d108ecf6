"""The inputs a worker calls its solution on, in buffers the referee owns and writes.

``InputSets`` stacks ``count`` copies of each tensor input in one shared buffer per input
(``shared.py``): the worker maps them, calls on set ``j``, and the referee writes fresh
values into the floating inputs of the sets a sample will use (``refresh``) and, after the
sample, compares every set it used byte for byte with what it wrote (``changed``): a
write into an input, in any call, timed ones included, is seen. Integer inputs are copied
into every set (or, when memory is short, shared by all sets) and compared with the
pristine values. The checked call's inputs are such a stack with one set.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .fresh import Call, Fresh, floating
from .shared import SharedBuffer, Slice, nbytes, reference

# On CUDA every set is compared with its window in one kernel (windows.differ). On the CPU,
# sets compared at a time: the expected windows are written into one temporary
# (fresh.gather) and compared in one go, at most CHECK_CHUNK sets and CHECK_BYTES of them.
CHECK_CHUNK = 64
CHECK_BYTES = 1 << 28


def set_bytes(values: list[Any], share_integers: bool = False) -> int:
    return sum(
        nbytes(v)
        for v in values
        if isinstance(v, torch.Tensor) and (floating(v) or not share_integers)
    )


@dataclass
class InputSets:
    pristine: list[Any]
    names: list[str]
    count: int
    device: torch.device
    share_integers: bool = False
    # (bytes, device) -> a buffer: a worker's ``lend``, which reuses its earlier buffers
    allocate: Callable[[int, torch.device], SharedBuffer | Slice] = SharedBuffer.create
    buffers: list[SharedBuffer | Slice] = field(default_factory=list)
    views: dict[int, torch.Tensor] = field(default_factory=dict)  # input index -> [count_i, ...]

    def __post_init__(self) -> None:
        for index, value in enumerate(self.pristine):
            if not isinstance(value, torch.Tensor):
                continue
            copies = 1 if self.shared(index) else self.count
            buffer = self.allocate(copies * nbytes(value), self.device)
            self.buffers.append(buffer)
            view = buffer.view(0, value.dtype, [copies, *value.shape])
            view.copy_(value.unsqueeze(0).expand_as(view))
            self.views[index] = view
        if self.device.type == "cuda":
            # The worker reads these buffers from its own process as soon as it is told of
            # them: the copies must have landed (a reused buffer still holds other bytes).
            torch.cuda.synchronize(self.device)

    def shared(self, index: int) -> bool:
        return self.share_integers and not floating(self.pristine[index])

    def message(self, op: str) -> tuple[dict[str, Any], list[int]]:
        """The message that shows these sets to the worker (``case``: the one set is the
        call's inputs; ``sets``: the stacked timing sets)."""
        fds: list[int] = []
        buffers, inputs, shared = [], [], []
        position = 0
        for index, value in enumerate(self.pristine):
            shared.append(self.shared(index))
            if index in self.views:
                buffer = self.buffers[position]
                buffers.append(buffer.describe(fds))
                view = self.views[index]
                tensor = view if op == "sets" else view[0]
                inputs.append({"tensor": reference(position, buffer.start, tensor)})
                position += 1
            else:
                inputs.append({"value": value})
        message = {"op": op, "inputs": inputs, "buffers": buffers}
        if op == "sets":
            message.update(count=self.count, shared=shared)
        return message, fds

    def refresh(self, windows: list[Call], fresh: Fresh) -> None:
        """Write window ``windows[j]`` into set ``j``, for every floating input; returns
        once the writes are done."""
        for index in fresh.pools:
            chosen = [window[index] for window in windows]
            fresh.gather(index, chosen, self.views[index][: len(windows)])
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def changed(self, windows: list[Call], fresh: Fresh | None) -> list[str]:
        """Names of inputs whose bytes in sets ``0..len(windows)-1`` differ from what was
        written there (without ``fresh``: from the pristine values)."""
        count = len(windows)
        flags: list[tuple[str, torch.Tensor]] = []
        for index, view in self.views.items():
            name, value = self.names[index], self.pristine[index]
            if fresh is not None and index in fresh.pools:
                chosen = [w[index] for w in windows]
                if view.is_cuda:
                    rows = view[:count].view(count, -1)
                    flags.append((name, fresh.differ(index, chosen, rows)))
                    continue
                one = max(1, value.numel() * value.element_size())
                chunk = max(1, min(CHECK_CHUNK, CHECK_BYTES // one))
                for start in range(0, count, chunk):
                    stop = min(count, start + chunk)
                    expected = torch.empty_like(view[start:stop])
                    fresh.gather(index, chosen[start:stop], expected)
                    flags.append((name, _differs(view[start:stop], expected)))
            else:
                used = view[:1] if self.shared(index) else view[:count]
                flags.append((name, _differs(used, value.unsqueeze(0).expand_as(used))))
        if not flags:
            return []
        found = torch.stack([flag for _, flag in flags]).tolist()
        return sorted({name for (name, _), flag in zip(flags, found, strict=True) if flag})


def _differs(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """A device bool: do the bytes differ anywhere? (NaN-safe: bytes, not values.) Compared
    as the widest integers the rows' bytes divide into: the comparison's own temporary is
    then an eighth of the bytes, not as many (on the H200 the compare of every set after
    every sample was a sixth of an audit's time, docs/measurements/case-breakdown.md)."""
    rows = actual.shape[0]
    left = actual.reshape(rows, -1).view(torch.uint8)
    right = expected.contiguous().reshape(rows, -1).view(torch.uint8)
    dtype = next(d for d in _WIDEST_FIRST if _views_as(left, d) and _views_as(right, d))
    return torch.ne(left.view(dtype), right.view(dtype)).any()


_WIDEST_FIRST = (torch.int64, torch.int32, torch.int16, torch.uint8)


def _views_as(raw: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the bytes ``raw`` (2-D uint8) can be viewed as ``dtype`` in place."""
    size = dtype.itemsize
    return (
        raw.shape[1] % size == 0
        and raw.storage_offset() % size == 0
        and (raw.shape[1] <= 1 or raw.stride(1) == 1)
        and (raw.shape[0] <= 1 or raw.stride(0) % size == 0)
    )
