"""Reference outputs kept on disk between runs, each entry authenticated by a MAC.

An entry is ``<key>.safetensors`` (the outputs) and ``<key>.mac`` (HMAC-SHA256 with the
judge's key over the cache key and the SHA-256 of each CHUNK of the file's bytes), in a
folder no worker can see. An entry that is missing, torn or fails its MAC is deleted and
recomputed, never trusted.

The largest entries are a GB (the FP32 output of a BF16 GEMM at M 24,576): an audit reads
hundreds. The file is read once into memory, its chunks hashed on several threads, and the
tensors are views of those same bytes (no second copy) until they go to the device: on
the H200 a read, one HMAC over the whole file and a copy by ``safetensors`` took 0.56 s a
case for those GEMMs (docs/measurements/case-breakdown.md, eleventh session).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from safetensors.torch import load, save

from .. import schema
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

    def _tag(self, key: str, data: bytes | bytearray) -> str:
        return mac(self.secret, b"reference", key.encode(), chunk_digests(data))

    def load(self, key: str, device: torch.device) -> list[torch.Tensor] | None:
        data_path, tag_path = self._paths(key)
        try:
            data, tag = _read(data_path), tag_path.read_text().strip()
        except OSError:
            return None
        if not hmac.compare_digest(tag, self._tag(key, data)):
            for path in (data_path, tag_path):
                path.unlink(missing_ok=True)
            return None
        stored = views(data)
        return [stored[str(i)].to(device) for i in range(len(stored))]

    def store(self, key: str, outputs: list[torch.Tensor]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        data = save({str(i): o.detach().to("cpu").contiguous() for i, o in enumerate(outputs)})
        data_path, tag_path = self._paths(key)
        for path, content in ((data_path, data), (tag_path, self._tag(key, data).encode())):
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


def _read(path: Path) -> bytearray:
    """The whole file in one writable buffer (tensors may be views of it)."""
    with path.open("rb") as file:
        data = bytearray(os.fstat(file.fileno()).st_size)
        if file.readinto(data) != len(data):
            raise OSError(f"{path}: shorter than its size")
    return data


def views(data: bytearray) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file held in ``data``, as views of it where their
    offsets are aligned to their element size (else, or for a dtype not named here, as
    ``safetensors`` loads them: copies). The bytes were authenticated before this."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(bytes(data[8 : 8 + size]))
    header.pop("__metadata__", None)
    base, found = 8 + size, {}
    for name, entry in header.items():
        dtype = _DTYPES.get(entry["dtype"])
        begin, end = entry["data_offsets"]
        width = dtype.itemsize if dtype is not None else 0
        if dtype is None or (base + begin) % width or end < begin:
            return load(bytes(data))
        count = (end - begin) // width
        if count:
            flat = torch.frombuffer(data, dtype=dtype, count=count, offset=base + begin)
        else:  # frombuffer refuses an empty view
            flat = torch.empty(0, dtype=dtype)
        found[name] = flat.reshape(entry["shape"])
    return found
