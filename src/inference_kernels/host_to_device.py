"""Host bytes to the device through pinned buffers, a chunk per thread.

The referee moves every workload's inputs (a private mapping of the prefetch helper's
memfd) and its cached reference (a file under the cache) to the device. From pageable
memory the driver stages the copy itself: 1 GB in 0.18-0.22 s on the H200 machines, where
the same bytes copied by us into pinned buffers in chunks of 64 MB, several at once, and
sent from there took 0.047-0.062 s (``benchmarks/h2d.py``, fifteenth session).

``upload`` splits each (source, destination) pair into chunks; each of THREADS threads
copies a chunk into its own pinned buffer, shows it to ``each`` (the reference cache
hashes it there: what it authenticates is what goes to the device), sends it and waits
for the copy before taking the next chunk. The copies wait for what the caller's stream
had queued (the destinations may be memory just freed there). Each process keeps THREADS
pinned buffers of CHUNK bytes (512 MB) once it has uploaded. Off CUDA the buffers are plain
memory and the same code runs (the CPU tests use it so).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

CHUNK = 64 << 20  # bytes
THREADS = max(1, min(8, (os.cpu_count() or 2) // 2))
SMALL = 2 * CHUNK  # bytes: less goes by ``.to``
Each = Callable[[int, memoryview], None]  # (chunk index over all pairs, its bytes)

_slots: dict[tuple[bool, int], queue.SimpleQueue] = {}  # the buffers, kept between uploads
_lock = threading.Lock()


def _buffers(pinned: bool, chunk: int) -> queue.SimpleQueue:
    with _lock:
        key = (pinned, chunk)
        if key not in _slots:
            free: queue.SimpleQueue = queue.SimpleQueue()
            for _ in range(THREADS):
                free.put(torch.empty(chunk, dtype=torch.uint8, pin_memory=pinned))
            _slots[key] = free
        return _slots[key]


def upload(
    pairs: list[tuple[torch.Tensor, torch.Tensor]],
    each: Each | None = None,
    chunk: int = CHUNK,
) -> None:
    """Copy each source (flat uint8, host) into its destination (flat uint8, same size,
    any device); ``each(index, bytes)`` sees every chunk, numbered over all pairs in order,
    each chunk ``chunk`` bytes from the start of its pair (the last one shorter)."""
    jobs = []
    for source, destination in pairs:
        if source.numel() != destination.numel():
            raise ValueError(f"{source.numel()} bytes into {destination.numel()}")
        for start in range(0, source.numel(), chunk):
            jobs.append((source, destination, start, min(start + chunk, source.numel())))
    if not jobs:
        return
    cuda = any(destination.device.type == "cuda" for _, destination, _, _ in jobs)
    free = _buffers(cuda and torch.cuda.is_available(), chunk)
    ready = {}  # per device: the caller's stream so far (the destinations may be new there)
    if cuda:
        for device in {destination.device for _, destination, _, _ in jobs}:
            ready[device] = torch.cuda.Event()
            ready[device].record(torch.cuda.current_stream(device))

    def one(index: int) -> None:
        slot = free.get()
        try:
            _copy(slot, *jobs[index], ready, each, index)
        finally:
            free.put(slot)

    if len(jobs) == 1:
        one(0)
        return
    with ThreadPoolExecutor(min(THREADS, len(jobs))) as pool:
        for _ in pool.map(one, range(len(jobs))):
            pass


def _copy(slot, source, destination, start, end, ready, each, index) -> None:
    staged = slot[: end - start]
    np.copyto(staged.numpy(), source[start:end].numpy())  # one thread's memcpy
    if each is not None:
        each(index, memoryview(staged.numpy()))
    if destination.device.type != "cuda":
        destination[start:end].copy_(staged)
        return
    with torch.cuda.device(destination.device):
        stream = torch.cuda.current_stream()
        stream.wait_event(ready[destination.device])
        done = torch.cuda.Event()
        try:
            destination[start:end].copy_(staged, non_blocking=True)
        finally:
            done.record(stream)
            done.synchronize()  # before the slot takes the next chunk, whatever happened


def to_device(tensors: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Host tensors copied to ``device``: through ``upload`` on CUDA when they are SMALL
    bytes or more in all, else by ``.to`` (64 MB: 11 ms by ``.to``, 16 ms through
    ``upload``, whose threads and events cost more than they save there)."""
    small = sum(t.numel() * t.element_size() for t in tensors) < SMALL
    if device.type != "cuda" or small or any(t.device.type != "cpu" for t in tensors):
        return [t.to(device) for t in tensors]
    made = [torch.empty(t.shape, dtype=t.dtype, device=device) for t in tensors]
    pairs = [
        (_bytes(t.contiguous()), _bytes(d)) for t, d in zip(tensors, made, strict=True) if t.numel()
    ]
    upload(pairs)
    return made


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.reshape(-1).view(torch.uint8)
