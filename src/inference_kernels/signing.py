"""The judge's signing key, and MACs over result rows and cached reference outputs.

The key is 32 random bytes in a private file (``judge.key``, mode 0600, in a 0700
folder): ``$INFERENCE_KERNELS_CONFIG``, else ``$XDG_CONFIG_HOME/inference-kernels``, else
``~/.config/inference-kernels``. The sandbox hides that folder from every solution, so a
row or a cache entry that verifies was written by this judge on a machine holding the
key. A report copied from another machine verifies only where that machine's key is
(point ``INFERENCE_KERNELS_CONFIG`` at a folder holding it).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

MAC_FIELD = "mac"


def key_folder() -> Path:
    if os.environ.get("INFERENCE_KERNELS_CONFIG"):
        return Path(os.environ["INFERENCE_KERNELS_CONFIG"])
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "inference-kernels"


def key_path() -> Path:
    return key_folder() / "judge.key"


_KEYS: dict[Path, bytes] = {}  # keys read in this process; "no key yet" is never kept


def _key(path: Path, create: bool) -> bytes | None:
    if path in _KEYS:
        return _KEYS[path]
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if not create:
            return None
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        data = secrets.token_bytes(32)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
        try:
            os.link(partial, path)  # the first writer wins; everyone reads what it wrote
        except FileExistsError:
            pass
        os.unlink(partial)
        data = path.read_bytes()
    if len(data) != 32:
        raise ValueError(f"{path}: a judge key is 32 bytes")
    _KEYS[path] = data
    return data


def key(create: bool = True) -> bytes | None:
    """The judge's key (made on first use when ``create``), or None when there is none."""
    return _key(key_path(), create)


def mac(secret: bytes, *parts: bytes) -> str:
    digest = hmac.new(secret, digestmod=hashlib.sha256)
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


def _canonical(row: dict[str, Any]) -> bytes:
    body = {k: v for k, v in row.items() if k != MAC_FIELD}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def sign_row(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, MAC_FIELD: mac(key(), b"row", _canonical(row))}


def row_verifies(row: dict[str, Any], secret: bytes | None) -> bool:
    tag = row.get(MAC_FIELD)
    if secret is None or not isinstance(tag, str):
        return False
    return hmac.compare_digest(tag, mac(secret, b"row", _canonical(row)))
