"""Reference outputs kept on disk between runs, each entry authenticated by a MAC.

An entry is ``<key>.safetensors`` (the outputs) and ``<key>.mac`` (HMAC-SHA256 with the
judge's key over the cache key and the file's bytes), in a folder no worker can see. An
entry that is missing, torn or fails its MAC is deleted and recomputed, never trusted.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
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

    def _tag(self, key: str, data: bytes) -> str:
        return mac(self.secret, b"reference", key.encode(), data)

    def load(self, key: str, device: torch.device) -> list[torch.Tensor] | None:
        data_path, tag_path = self._paths(key)
        try:
            data, tag = data_path.read_bytes(), tag_path.read_text().strip()
        except OSError:
            return None
        if not hmac.compare_digest(tag, self._tag(key, data)):
            for path in (data_path, tag_path):
                path.unlink(missing_ok=True)
            return None
        stored = load(data)
        return [stored[str(i)].to(device) for i in range(len(stored))]

    def store(self, key: str, outputs: list[torch.Tensor]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        data = save({str(i): o.detach().to("cpu").contiguous() for i, o in enumerate(outputs)})
        data_path, tag_path = self._paths(key)
        for path, content in ((data_path, data), (tag_path, self._tag(key, data).encode())):
            partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
            partial.write_bytes(content)
            os.replace(partial, path)
