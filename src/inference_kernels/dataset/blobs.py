"""The content-addressed tensor store: ``blob/workloads/<definition>/<sha256>.safetensors``.

A blob holds one tensor under the key ``tensor``. Its name is the tensor's content
hash: sha256 over ``"<dtype>:<comma-separated shape>\\n"`` followed by the raw bytes in
C order, so identical tensors share one file and different shapes or dtypes of the
same bytes do not. The safetensors metadata says where the tensor came from
(``origin``: ``captured`` or ``stand-in``); a file without that key is taken to be
captured data from a published dataset.

Peer datasets may store several tensors per file under other names; their files are
read normally and only the hash check is skipped (there is no hash to check against).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save

from ..dtypes import dtype_name
from ..errors import DatasetError
from ..schema import Definition, SafetensorsInput, Workload
from .files import write_atomically
from .shapes import verify_tensor

TENSOR_KEY = "tensor"
_HASH_NAME = re.compile(r"^[0-9a-f]{64}$")


def content_hash(tensor: torch.Tensor) -> str:
    digest = hashlib.sha256()
    shape = ",".join(str(size) for size in tensor.shape)
    digest.update(f"{dtype_name(tensor.dtype)}:{shape}\n".encode())
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    digest.update(flat.view(torch.uint8).numpy())  # hashed in place, no copy of the bytes
    return digest.hexdigest()


def blob_path(definition: str, digest: str) -> str:
    return f"blob/workloads/{definition}/{digest}.safetensors"


def put(
    root: Path,
    definition: str,
    tensor: torch.Tensor,
    metadata: dict[str, str],
    digest: str | None = None,
) -> SafetensorsInput:
    """Write ``tensor`` once (atomically) and return the descriptor that names it.
    ``digest`` is its ``content_hash`` when the caller has it already."""
    relative = blob_path(definition, digest or content_hash(tensor))
    target = root / relative
    if not target.exists():
        payload = save({TENSOR_KEY: tensor.detach().to("cpu").contiguous()}, metadata=metadata)
        write_atomically(target, payload)
    return SafetensorsInput(type="safetensors", path=relative, tensor_key=TENSOR_KEY)


def resolve(data_root: Path, descriptor: SafetensorsInput) -> Path:
    path = (data_root / descriptor.path).resolve()
    if not path.is_relative_to(data_root.resolve()):
        raise DatasetError(descriptor.path, "path", "escapes the data root")
    return path


def load(data_root: Path, descriptor: SafetensorsInput) -> tuple[torch.Tensor, dict[str, str]]:
    """Read one tensor and the file's metadata. Raises DatasetError naming the file."""
    path = resolve(data_root, descriptor)
    if not path.is_file():
        raise DatasetError(descriptor.path, "path", "blob file is missing")
    try:
        with safe_open(str(path), framework="pt") as handle:
            if descriptor.tensor_key not in handle.keys():
                raise DatasetError(descriptor.path, "tensor_key", f"no {descriptor.tensor_key!r}")
            return handle.get_tensor(descriptor.tensor_key), handle.metadata() or {}
    except DatasetError:
        raise
    except Exception as error:  # safetensors raises its own types on damaged files
        raise DatasetError(descriptor.path, "", f"unreadable safetensors file: {error}") from None


def origin(data_root: Path, descriptor: SafetensorsInput) -> str | None:
    """The ``origin`` a blob's metadata records (a file without it is captured data), or
    None when the file cannot be read."""
    try:
        with safe_open(str(resolve(data_root, descriptor)), framework="pt") as handle:
            return (handle.metadata() or {}).get("origin", "captured")
    except Exception:
        return None


def hash_problem(descriptor: SafetensorsInput, tensor: torch.Tensor) -> str | None:
    """The mismatch between a hash-named blob and its content, if any."""
    stem = Path(descriptor.path).name.removesuffix(".safetensors")
    if not _HASH_NAME.match(stem):
        return None
    actual = content_hash(tensor)
    return None if actual == stem else f"content hash {actual[:12]}... differs from its name"


def load_verified(
    definition: Definition,
    workload: Workload,
    name: str,
    descriptor: SafetensorsInput,
    data_root: Path,
    verify_hash: bool = True,
) -> tuple[torch.Tensor, dict[str, str]]:
    """Load input ``name`` and verify its shape, dtype and (for hash-named blobs) hash."""
    tensor, metadata = load(data_root, descriptor)
    verify_tensor(definition, workload, name, tensor, descriptor.path)
    if verify_hash and (problem := hash_problem(descriptor, tensor)):
        raise DatasetError(descriptor.path, name, problem)
    return tensor, metadata
