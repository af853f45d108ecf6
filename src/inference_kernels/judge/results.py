"""The results file: an environment row, then one row per (solution, workload) case.

Rows are signed (``signing.py``), appended and flushed to disk one at a time, so a run
killed at any moment loses at most the row being written; a torn last line is dropped on
resume, and so is any row whose MAC fails (the file is rewritten without them).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import DatasetError
from ..schema import CaseRow, EnvironmentRow
from ..signing import key, row_verifies, sign_row

Case = tuple[str, str, str | None]  # (definition, solution, uuid)


def digest(model) -> str:
    """sha256 of a model's canonical JSON: what a row says it was judged with."""
    return hashlib.sha256(
        json.dumps(model.model_dump(mode="json"), sort_keys=True).encode()
    ).hexdigest()


@dataclass
class Earlier:
    """What a report already holds: its case rows by (definition, solution, uuid), and its
    first environment row."""

    cases: dict[Case, dict] = field(default_factory=dict)
    environment: dict | None = None
    rows: list[dict] = field(default_factory=list)  # every row, in order
    dropped: int = 0  # rows whose MAC failed


def earlier_rows(path: Path) -> Earlier:
    """The signed rows already in ``path``. A row counts only when whole, ended by its
    newline and verified by its MAC; from the first torn row (a kill) the file is cut, and
    rows that fail their MAC are dropped from it, so that the resumed run appends to rows
    this judge wrote. A report whose first environment row fails is refused."""
    earlier = Earlier()
    if not path.exists():
        return earlier
    text = path.read_text()
    secret = key(create=False)
    kept: list[str] = []
    torn = False
    for number, line in enumerate(text.split("\n")[:-1], 1):  # after the last newline: unfinished
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            torn = True
            break
        if not isinstance(row, dict) or not row_verifies(row, secret):
            if not earlier.rows:
                raise DatasetError(
                    path,
                    f"line {number}",
                    "not signed by this judge's key (a report written elsewhere, or edited); "
                    "resume only reports this judge wrote, or start another --report",
                )
            earlier.dropped += 1
            continue
        kept.append(line)
        earlier.rows.append(row)
        if row.get("type") == "case":
            earlier.cases[(row["definition"], row["solution"], row.get("uuid"))] = row
        elif row.get("type") == "environment" and earlier.environment is None:
            earlier.environment = row
    if torn or earlier.dropped or not text.endswith("\n"):
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.write_text("".join(line + "\n" for line in kept))
        os.replace(partial, path)
    return earlier


class ResultWriter:
    def __init__(self, path: Path | None):
        self.path = path
        self.lock = threading.Lock()
        self.rows: list[dict[str, Any]] = []
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, row: CaseRow | EnvironmentRow) -> None:
        data = sign_row(row.model_dump(mode="json", exclude_none=True))
        with self.lock:
            self.rows.append(data)
            if self.path is None:
                return
            with self.path.open("a") as stream:
                stream.write(json.dumps(data) + "\n")
                stream.flush()
                os.fsync(stream.fileno())


def _nvidia_smi() -> list[dict[str, str]]:
    fields = (
        "index,name,uuid,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,"
        "power.limit"
    )
    try:
        output = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    keys = fields.split(",")
    return [
        dict(zip(keys, (v.strip() for v in line.split(",")), strict=False))
        for line in output.strip().splitlines()
    ]


def library_versions() -> dict[str, str]:
    import numpy
    import torch

    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "numpy": numpy.__version__,
        "platform": platform.platform(),
    }
    try:
        import triton

        versions["triton"] = triton.__version__
    except ImportError:
        pass
    from .. import __version__

    versions["inference_kernels"] = __version__
    return versions


def host_cpu() -> dict[str, Any]:
    """The host's processor: CPU times (and the references' speed) depend on it far more
    than on anything else: the dataset's BF16 GEMM cases took 5-6x longer on an AVX2-only
    machine than on the one of the earlier CPU figures (README)."""
    import torch

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    return {
        "model": model or platform.processor(),
        "capability": torch.backends.cpu.get_cpu_capability(),
        "cores": os.cpu_count(),
    }


def environment_row(devices: list[dict[str, Any]], **extra: Any) -> EnvironmentRow:
    gpus = {entry.get("index"): entry for entry in _nvidia_smi()}
    for device in devices:
        index = device.get("device", "").partition(":")[2]
        if index in gpus:
            device["nvidia_smi"] = gpus[index]
        if device.get("device") == "cpu" and "ray" not in device:  # Ray's nodes are others
            device["cpu"] = host_cpu()
    return EnvironmentRow(
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        devices=devices,
        versions=library_versions(),
        **extra,
    )
