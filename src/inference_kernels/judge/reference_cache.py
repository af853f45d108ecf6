"""Reference outputs kept on disk between runs, each entry authenticated by a MAC.

An entry is ``<key>.safetensors`` (the outputs) and ``<key>.mac`` (HMAC-SHA256 with the
judge's key over the cache key and the SHA-256 of each CHUNK of the file's bytes), in a
folder no worker can see. An entry that is missing, torn or fails its MAC is deleted and
recomputed, never trusted.

The largest entries are GBs (the FP32 output of a BF16 GEMM at M 24,576 is 1.2 GB, of the
largest 11x11x11 neighborhood attention 5 GB): an audit reads 38 GB of them. For a CUDA
device the file is mapped, and each CHUNK is copied into a pinned buffer, hashed there and
sent to the device from there, several chunks at once (``host_to_device.upload``): what
is authenticated is what reaches the device, and the tensors are views of that one device
buffer. Read into new memory first and copied from pageable memory, 1 GB took 1.05 s on the
H200 machine; through pinned buffers, about 0.05 s plus the hashing (``benchmarks/h2d.py``).
Elsewhere the file is read into memory, its chunks hashed on several threads, and the
tensors are views of those bytes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import mmap
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from safetensors.torch import load, save

from .. import schema
from ..host_to_device import upload
from ..materialize.standins import STANDIN_VERSION
from ..signing import mac


def reference_key(definition: schema.Definition, workload: schema.Workload, device: str) -> str:
    """Cache key: reference source, the workload (axes, descriptors), torch and device type."""
    material = {
        "definition": definition.name,
        "reference": definition.reference,
        "outputs": {k: v.model_dump() for k, v in definition.outputs.items()},
        "workload": workload.model_dump(mode="json"),
        "torch": torch.__version__,
        "device": torch.device(device).type,
        "standins": STANDIN_VERSION,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


class ReferenceCache:
    def __init__(self, folder: Path, secret: bytes):
        self.folder = folder
        self.secret = secret

    def _paths(self, key: str) -> tuple[Path, Path]:
        return self.folder / f"{key}.safetensors", self.folder / f"{key}.mac"

    def _tag(self, key: str, digests: bytes) -> str:
        """The entry's MAC, over its key and its chunks' digests (``chunk_digests``)."""
        return mac(self.secret, b"reference", key.encode(), digests)

    def load(self, key: str, device: torch.device) -> list[torch.Tensor] | None:
        data_path, tag_path = self._paths(key)
        try:
            tag = tag_path.read_text().strip()
            if _uploads(device):
                data, digests = _uploaded(data_path, device)
            else:
                data = _read(data_path)
                digests = chunk_digests(data)
        except OSError:
            return None
        if not hmac.compare_digest(tag, self._tag(key, digests)):
            for path in (data_path, tag_path):
                path.unlink(missing_ok=True)
            return None
        stored = views(data)
        return [stored[str(i)].to(device) for i in range(len(stored))]

    def store(self, key: str, outputs: list[torch.Tensor]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        data = save({str(i): o.detach().to("cpu").contiguous() for i, o in enumerate(outputs)})
        data_path, tag_path = self._paths(key)
        tag = self._tag(key, chunk_digests(data)).encode()
        for path, content in ((data_path, data), (tag_path, tag)):
            partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
            partial.write_bytes(content)
            os.replace(partial, path)


CHUNK = 64 << 20  # bytes hashed apart, each on a thread of its own (hashlib lets go of the GIL)
_THREADS = min(8, os.cpu_count() or 1)
# safetensors' dtype names (the format's own, not torch's) of the outputs a reference may have
_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}


def chunk_digests(data: bytes | bytearray) -> bytes:
    """The SHA-256 of each CHUNK of ``data``, concatenated (what the MAC covers)."""
    view = memoryview(data)
    starts = range(0, max(len(view), 1), CHUNK)
    if len(starts) == 1:
        return hashlib.sha256(view).digest()
    with ThreadPoolExecutor(_THREADS) as pool:
        return b"".join(pool.map(lambda s: hashlib.sha256(view[s : s + CHUNK]).digest(), starts))


def _uploads(device: torch.device) -> bool:
    """Whether a load goes to the device through pinned buffers (the tests set it for the
    CPU, to run that path)."""
    return device.type == "cuda"


def _uploaded(path: Path, device: torch.device) -> tuple[torch.Tensor, bytes]:
    """The file's bytes on ``device`` (uint8) and its chunks' digests, hashed from the
    pinned buffers the bytes went to the device from."""
    with path.open("rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            raise OSError(f"{path}: empty")
        mapped = mmap.mmap(file.fileno(), size, access=mmap.ACCESS_COPY)  # torch wants it writable
    try:
        source = torch.frombuffer(mapped, dtype=torch.uint8)
        on_device = torch.empty(size, dtype=torch.uint8, device=device)
        digests: list[bytes] = [b""] * (-(-size // CHUNK))

        def each(index: int, chunk: memoryview) -> None:
            digests[index] = hashlib.sha256(chunk).digest()

        upload([(source, on_device)], each, CHUNK)
        del source
    finally:
        mapped.close()
    return on_device, b"".join(digests)


def _read(path: Path) -> bytearray:
    """The whole file in one writable buffer (tensors may be views of it)."""
    with path.open("rb") as file:
        data = bytearray(os.fstat(file.fileno()).st_size)
        if file.readinto(data) != len(data):
            raise OSError(f"{path}: shorter than its size")
    return data


def views(data: bytearray | torch.Tensor) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file held in ``data`` (host bytes, or a uint8 tensor on
    any device), as views of it; a tensor whose offset is not aligned to its element size
    is a copy of its own, and a file with a dtype not named here is loaded by
    ``safetensors`` (copies). The bytes were authenticated before this."""
    flat = torch.frombuffer(data, dtype=torch.uint8) if not isinstance(data, torch.Tensor) else data
    size = int.from_bytes(bytes(flat[:8].cpu().numpy()), "little")
    header = json.loads(bytes(flat[8 : 8 + size].cpu().numpy()))
    header.pop("__metadata__", None)
    base, found = 8 + size, {}
    for name, entry in header.items():
        dtype = _DTYPES.get(entry["dtype"])
        begin, end = entry["data_offsets"]
        if dtype is None or end < begin:
            loaded = load(bytes(flat.cpu().numpy()))
            return {k: v.to(flat.device) for k, v in loaded.items()}
        part = flat[base + begin : base + end]
        if (base + begin) % dtype.itemsize:
            part = part.clone()  # an allocation of its own is aligned
        found[name] = part.view(dtype).reshape(entry["shape"])
    return found
