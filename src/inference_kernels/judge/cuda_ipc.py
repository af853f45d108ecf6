"""CUDA memory shared between processes, through the driver API (``libcuda.so.1``).

torch's own CUDA sharing needs a reference-count file in ``/dev/shm``, which a sandboxed
worker does not share with the judge. This module uses the driver's IPC handles
directly: a 64-byte handle names an allocation, and another process on the same device
maps it. Two directions are used:

- the referee allocates dedicated buffers (``Allocation``: never the caching allocator,
  whose segments hold other tensors) for a worker's inputs and exports their handles;
- a worker exports the segments holding its outputs (``export``), and the referee maps
  them (``Imports``) and copies the outputs out.

Every call runs in the calling thread's current context: torch's primary context for
the process's device, made current by ``torch.cuda.set_device`` and a first allocation.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass, field

import torch

_LAZY_ENABLE_PEER_ACCESS = 1


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


class CudaIpcError(RuntimeError):
    pass


_driver: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _driver
    if _driver is None:
        _driver = ctypes.CDLL("libcuda.so.1")
    return _driver


@functools.cache
def _function(*names: str):
    for name in names:
        found = getattr(_lib(), name, None)
        if found is not None:
            return found
    raise CudaIpcError(f"libcuda.so.1 has none of {names}")


def _check(result: int, what: str) -> None:
    if result != 0:
        text = ctypes.c_char_p()
        _function("cuGetErrorName")(result, ctypes.byref(text))
        name = text.value.decode() if text.value else str(result)
        raise CudaIpcError(f"{what} failed: {name}")


def _pointer(value: int) -> ctypes.c_uint64:
    return ctypes.c_uint64(value)


class _Interface:
    """A __cuda_array_interface__ over raw bytes, so torch wraps them without a copy."""

    def __init__(self, address: int, size: int):
        self.__cuda_array_interface__ = {
            "shape": (size,),
            "typestr": "|u1",
            "data": (address, False),
            "version": 3,
            "strides": None,
        }


def wrap(address: int, size: int, device: torch.device) -> torch.Tensor:
    """A uint8 tensor over ``size`` bytes of device memory at ``address`` (no copy)."""
    return torch.as_tensor(_Interface(address, size), device=device)


def segment_at(address: int) -> tuple[int, int]:
    """(base address, size) of the allocation that holds ``address``."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _check(
        _function("cuMemGetAddressRange_v2", "cuMemGetAddressRange")(
            ctypes.byref(base), ctypes.byref(size), _pointer(address)
        ),
        "cuMemGetAddressRange",
    )
    return base.value, size.value


def handle_of(base: int) -> str:
    """The IPC handle (hex) of the allocation starting at ``base``."""
    handle = _Handle()
    _check(
        _function("cuIpcGetMemHandle")(ctypes.byref(handle), _pointer(base)), "cuIpcGetMemHandle"
    )
    return bytes(handle).hex()  # all 64 bytes (``.reserved`` would stop at a NUL)


@dataclass
class Allocation:
    """A dedicated device allocation (cuMemAlloc), its tensor view and its IPC handle."""

    address: int
    size: int
    tensor: torch.Tensor
    handle: str

    @classmethod
    def create(cls, size: int, device: torch.device) -> Allocation:
        address = ctypes.c_uint64()
        _check(
            _function("cuMemAlloc_v2", "cuMemAlloc")(ctypes.byref(address), ctypes.c_size_t(size)),
            f"cuMemAlloc of {size} bytes",
        )
        return cls(address.value, size, wrap(address.value, size, device), handle_of(address.value))

    def free(self) -> None:
        self.tensor = None  # type: ignore[assignment]
        _check(_function("cuMemFree_v2", "cuMemFree")(_pointer(self.address)), "cuMemFree")


@dataclass
class Imports:
    """Allocations of another process mapped into this one, by handle; closed together."""

    device: torch.device
    opened: dict[str, tuple[int, int]] = field(default_factory=dict)  # handle -> (address, size)

    def open(self, handle: str) -> torch.Tensor:
        """A uint8 tensor over the whole allocation ``handle`` names (mapped once per handle;
        its size is the driver's, not what the other process says)."""
        if handle not in self.opened:
            try:
                raw = bytes.fromhex(handle)
            except ValueError:
                raw = b""
            if len(raw) != 64:
                raise CudaIpcError("an IPC handle is 64 bytes in hex")
            address = ctypes.c_uint64()
            _check(
                _function("cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle")(
                    ctypes.byref(address),
                    _Handle.from_buffer_copy(raw),
                    ctypes.c_uint(_LAZY_ENABLE_PEER_ACCESS),
                ),
                "cuIpcOpenMemHandle",
            )
            base, size = ctypes.c_uint64(), ctypes.c_size_t()
            _check(
                _function("cuMemGetAddressRange_v2", "cuMemGetAddressRange")(
                    ctypes.byref(base), ctypes.byref(size), address
                ),
                "cuMemGetAddressRange",
            )
            self.opened[handle] = (address.value, size.value - (address.value - base.value))
        address, size = self.opened[handle]
        return wrap(address, size, self.device)

    def close(self) -> None:
        if self.opened:
            torch.cuda.synchronize(self.device)
        for address, _ in self.opened.values():
            _function("cuIpcCloseMemHandle")(_pointer(address))
        self.opened.clear()
