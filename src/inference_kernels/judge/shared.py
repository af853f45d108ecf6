"""Tensors that cross between the referee and a sandboxed worker, as plain data.

Nothing is pickled. A message carries *buffers* and *tensor references* as JSON:

- a buffer is ``{"kind": "memfd", "fd": i, "size": n}`` (on the CPU: an anonymous
  shared-memory file, the i-th descriptor passed with the message) or
  ``{"kind": "cuda", "handle": hex, "size": n}`` (a device allocation's IPC handle); a
  worker announces each of its buffers once per case, with an ``id``;
- a tensor reference is ``{"buffer": id, "offset": bytes, "dtype": name, "shape": [...],
  "stride": [...]}``.

The referee owns the buffers of a worker's inputs (``SharedBuffer``: a sealed memfd, or
a dedicated cuMemAlloc allocation, never a caching-allocator segment that holds other
tensors) and writes into them; the worker maps them. A worker exports its outputs
(``Outbox``): on the CPU it copies them into a memfd it seals against shrinking, on CUDA
it names the segments that hold them. What a worker sends is checked before use: the
file is a sealed memfd, the reference lies inside its buffer, the dtype is known
(``read``); anything else raises ``TransportError``.
"""

from __future__ import annotations

import bisect
import fcntl
import math
import mmap
import os
import stat
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from ..dtypes import TORCH_DTYPES, dtype_name
from . import cuda_ipc

ALIGN = 256  # bytes: every tensor in a buffer starts on this boundary
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


class TransportError(ValueError):
    """What a worker sent cannot be read as the tensors it claims."""


def aligned(size: int) -> int:
    return -(-max(size, 1) // ALIGN) * ALIGN


def nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _memfd(size: int) -> tuple[int, mmap.mmap]:
    fd = os.memfd_create("inference-kernels", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    mapped = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    return fd, mapped


def _bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's elements, contiguous, as a flat uint8 tensor."""
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


@dataclass
class SharedBuffer:
    """A buffer the referee owns and a worker maps: ``tensor`` is its uint8 view here."""

    kind: str
    size: int
    tensor: torch.Tensor
    fd: int | None = None
    allocation: cuda_ipc.Allocation | None = None
    _mapped: mmap.mmap | None = None
    start: ClassVar[int] = 0  # where a lent part begins in the allocation (``Slice``)

    @classmethod
    def create(cls, size: int, device: torch.device) -> SharedBuffer:
        size = aligned(size)
        if device.type == "cuda":
            allocation = cuda_ipc.Allocation.create(size, device)
            return cls("cuda", size, allocation.tensor, allocation=allocation)
        fd, mapped = _memfd(size)
        return cls("memfd", size, torch.frombuffer(mapped, dtype=torch.uint8), fd, _mapped=mapped)

    def describe(self, fds: list[int]) -> dict[str, Any]:
        """This buffer as a message entry; a memfd's descriptor is appended to ``fds``."""
        if self.kind == "cuda":
            return {"kind": "cuda", "handle": self.allocation.handle, "size": self.size}
        fds.append(self.fd)
        return {"kind": "memfd", "fd": len(fds) - 1, "size": self.size}

    def view(self, offset: int, dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
        count = 1
        for extent in shape:
            count *= extent
        size = count * torch.empty((), dtype=dtype).element_size()
        return self.tensor[offset : offset + size].view(dtype).view(shape)

    def release(self) -> None:
        """Free the memory. On CUDA, only once no worker that mapped it still runs."""
        self.tensor = None  # type: ignore[assignment]
        if self.allocation is not None:
            self.allocation.free()
        if self._mapped is not None:
            self._mapped.close()
        if self.fd is not None:
            os.close(self.fd)


@dataclass
class Slice:
    """``size`` bytes of ``arena`` from ``start``: what a worker is lent for one case
    (``WorkerHandle.lend``). Described to the worker as its arena, with tensors at offsets
    from ``start``; views here are of the slice only."""

    arena: SharedBuffer
    start: int
    size: int

    def describe(self, fds: list[int]) -> dict[str, Any]:
        return self.arena.describe(fds)

    def view(self, offset: int, dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
        view = self.arena.view(self.start + offset, dtype, shape)
        if offset + view.numel() * view.element_size() > self.size:
            raise ValueError("a view past the end of its slice")
        return view


def _contiguous_strides(shape) -> list[int]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return strides[::-1]


def reference(
    buffer: int, offset: int, tensor: torch.Tensor, contiguous: bool = False
) -> dict[str, Any]:
    """The reference to ``tensor`` at ``offset`` bytes into buffer ``buffer`` (with its
    strides, or those of a contiguous copy)."""
    shape = list(tensor.shape)
    return {
        "buffer": buffer,
        "offset": offset,
        "dtype": dtype_name(tensor.dtype),
        "shape": shape,
        "stride": _contiguous_strides(shape) if contiguous else list(tensor.stride()),
    }


@dataclass
class Outbox:
    """A worker's tensors for the referee. Buffers are announced once per case, each with
    an id that references use: a memfd per ``add`` on the CPU (the outputs copied in), and
    on CUDA each device segment that holds an output, named by its IPC handle."""

    device: torch.device
    new: list[dict[str, Any]] = field(default_factory=list)  # announced with the next message
    fds: list[int] = field(default_factory=list)
    _ids: dict[tuple[int, int], int] = field(default_factory=dict)  # CUDA segment -> id
    _spans: list[tuple[int, int]] = field(default_factory=list)  # sorted (base, size) known
    _refs: dict[tuple, dict[str, Any]] = field(default_factory=dict)  # a tensor's reference
    _freed: int = -1
    _next: int = 0
    _arena: tuple[int, torch.Tensor] | None = None  # CPU: (id, its bytes)
    _mapped: mmap.mmap | None = None

    def _announce(self, buffer: dict[str, Any]) -> int:
        buffer["id"] = self._next
        self._next += 1
        self.new.append(buffer)
        return buffer["id"]

    def add(self, tensors: list[torch.Tensor]) -> list[dict[str, Any]]:
        """References for ``tensors``: copied into a sealed memfd arena (CPU; one per case,
        reused by every message, so its pages are touched once), or named by the device
        segments that hold them (CUDA)."""
        if self.device.type == "cuda":
            self._segments_changed()
            return [self._cuda(tensor) for tensor in tensors]
        offsets, total = [], 0
        for tensor in tensors:
            offsets.append(total)
            total += aligned(nbytes(tensor))
        if self._arena is None or self._arena[1].numel() < total:
            self._grow(max(aligned(total), 2 * self._arena[1].numel() if self._arena else 0))
        identity, whole = self._arena
        refs = []
        for tensor, offset in zip(tensors, offsets, strict=True):
            whole[offset : offset + nbytes(tensor)].copy_(_bytes_of(tensor))
            refs.append(reference(identity, offset, tensor, contiguous=True))
        return refs

    def _grow(self, size: int) -> None:
        fd, mapped = _memfd(size)
        self.fds.append(fd)
        identity = self._announce({"kind": "memfd", "fd": len(self.fds) - 1, "size": size})
        self._arena = (identity, torch.frombuffer(mapped, dtype=torch.uint8))
        self._mapped = mapped

    def _cuda(self, tensor: torch.Tensor) -> dict[str, Any]:
        key = (tensor.data_ptr(), tensor.dtype, tensor.shape, tensor.stride())
        cached = self._refs.get(key)
        if cached is not None:
            return cached
        base, size = self._segment(tensor.data_ptr())
        if (base, size) not in self._ids:
            self._ids[(base, size)] = self._announce(
                {"kind": "cuda", "handle": cuda_ipc.handle_of(base), "size": size}
            )
        ref = reference(self._ids[(base, size)], tensor.data_ptr() - base, tensor)
        self._refs[key] = ref
        return ref

    def _segment(self, address: int) -> tuple[int, int]:
        """(base, size) of the segment that holds ``address``: one the case has already
        named when it lies inside it (a sample's outputs mostly share a few segments),
        else the driver's answer (a call into libcuda per output was a sizeable part of the
        time the referee sees beyond the worker's timed calls)."""
        at = bisect.bisect_right(self._spans, (address, math.inf)) - 1
        if at >= 0 and address < self._spans[at][0] + self._spans[at][1]:
            return self._spans[at]
        found = cuda_ipc.segment_at(address)
        bisect.insort(self._spans, found)
        return found

    def _segments_changed(self) -> None:
        """Forget where tensors live once the caching allocator has freed any segment
        (its count of freed segments moved): a new segment at a freed address, even of the
        same size, is another allocation with another handle."""
        freed = torch.cuda.memory_stats(self.device).get("segment.all.freed", 0)
        if freed != self._freed:
            self.forget()
        self._freed = freed

    def forget(self) -> None:
        """Announce every segment again, under new ids, before referring to it."""
        self._ids, self._refs, self._spans = {}, {}, []

    def sent(self) -> None:
        """The announced buffers went out with a message."""
        for fd in self.fds:
            os.close(fd)
        self.new, self.fds = [], []

    def reset(self) -> None:
        """A new case: ids start again (a segment may have been freed and reused)."""
        self.sent()
        self.forget()
        self._next, self._arena = 0, None
        if self._mapped is not None:
            self._mapped.close()
            self._mapped = None


def _span(ref: dict[str, Any], itemsize: int) -> int:
    """Bytes from the reference's first element to one past its last."""
    if any(extent == 0 for extent in ref["shape"]):
        return 0
    last = sum(
        (extent - 1) * step for extent, step in zip(ref["shape"], ref["stride"], strict=True)
    )
    return (last + 1) * itemsize


def _typed(raw: torch.Tensor, ref: dict[str, Any]) -> torch.Tensor:
    """The tensor ``ref`` describes inside the uint8 tensor ``raw`` (bounds checked)."""
    dtype = TORCH_DTYPES.get(ref["dtype"])
    if dtype is None:
        raise TransportError(f"unknown dtype {ref['dtype']!r}")
    if len(ref["shape"]) != len(ref["stride"]) or any(v < 0 for v in ref["shape"] + ref["stride"]):
        raise TransportError("shape and stride must be non-negative and of one length")
    itemsize = torch.empty((), dtype=dtype).element_size()
    offset = ref["offset"]
    if offset < 0 or offset % itemsize or offset + _span(ref, itemsize) > raw.numel():
        raise TransportError(f"a tensor of {ref['dtype']} {ref['shape']} lies outside its buffer")
    usable = raw.numel() - raw.numel() % itemsize
    return raw[:usable].view(dtype).as_strided(ref["shape"], ref["stride"], offset // itemsize)


def _memfd_from_worker(fd: int) -> None:
    """Only a memfd sealed against shrinking is mapped: a file the worker could truncate
    would fault the reader (SIGBUS)."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise TransportError("a buffer descriptor is not a shared-memory file")
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        raise TransportError("a buffer descriptor is not a sealable memfd") from None
    if not seals & fcntl.F_SEAL_SHRINK:
        raise TransportError("a buffer memfd is not sealed against shrinking")


class Inbox:
    """The buffers one worker announced in the current case, mapped here by id; ``read``
    copies tensors out of them."""

    def __init__(self, device: torch.device):
        self.device = device
        self.imports = cuda_ipc.Imports(device) if device.type == "cuda" else None
        self.raws: dict[int, torch.Tensor] = {}
        self.handles: dict[int, str] = {}  # CUDA buffers announced, opened when first read
        self.maps: list[mmap.mmap] = []

    def announce(self, buffers: list[dict[str, Any]], fds: list[int]) -> None:
        """Record the buffers a message announces: a memfd is checked and mapped now (its
        descriptor goes with the message); a CUDA handle only when a tensor in it is read,
        so that announcing thousands costs the referee nothing. A descriptor is one buffer:
        a reply that announced one small memfd 4,096 times had the referee map it as often
        (60 ms, red team at 3cbba3c)."""
        named: set[int] = set()
        for buffer in buffers:
            identity, kind = buffer.get("id"), buffer.get("kind")
            if not isinstance(identity, int) or identity in self.raws or identity in self.handles:
                raise TransportError(f"buffer id {identity!r} is not new")
            if kind == "cuda" and self.imports is not None:
                self.handles[identity] = str(buffer.get("handle"))
            elif kind == "memfd" and self.imports is None:
                index = buffer.get("fd")
                if not isinstance(index, int) or not 0 <= index < len(fds):
                    raise TransportError("a buffer names no descriptor of its message")
                if index in named:
                    raise TransportError("two buffers name one descriptor")
                named.add(index)
                fd = fds[index]
                _memfd_from_worker(fd)
                size = os.fstat(fd).st_size
                flags, protection = mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE
                mapped = mmap.mmap(fd, size, flags=flags, prot=protection) if size else None
                if mapped is not None:
                    self.maps.append(mapped)
                empty = torch.empty(0, dtype=torch.uint8)
                self.raws[identity] = (
                    torch.frombuffer(mapped, dtype=torch.uint8) if mapped else empty
                )
            else:
                raise TransportError(f"a buffer of kind {kind!r} on {self.device.type}")

    def _raw(self, identity: int) -> torch.Tensor:
        if identity not in self.raws and identity in self.handles:
            try:
                self.raws[identity] = self.imports.open(self.handles[identity])
            except cuda_ipc.CudaIpcError as error:
                raise TransportError(str(error)) from None
        raw = self.raws.get(identity)
        if raw is None:
            raise TransportError(f"a tensor names buffer {identity}, never announced")
        return raw

    def read(self, refs: list[dict[str, Any]]) -> list[torch.Tensor]:
        """Private copies of the tensors ``refs`` name."""
        return [_typed(self._raw(ref["buffer"]), ref).clone() for ref in refs]

    def close(self) -> None:
        """The case is over: unmap everything (views first: a mapping with views stays)."""
        self.raws.clear()
        self.handles.clear()
        for mapped in self.maps:
            mapped.close()
        self.maps = []
        if self.imports is not None:
            self.imports.close()
