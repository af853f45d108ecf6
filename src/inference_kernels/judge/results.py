"""The results file: an environment row, then one row per (solution, workload) case.

Rows are appended and flushed to disk one at a time, so a run killed at any moment
loses at most the row being written; a torn last line is dropped on resume.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..schema import CaseRow, EnvironmentRow

Case = tuple[str, str, str | None]  # (definition, solution, uuid)


@dataclass
class Earlier:
    """What a report already holds: its case rows by (definition, solution, uuid), and its
    first environment row."""

    cases: dict[Case, dict] = field(default_factory=dict)
    environment: dict | None = None


def earlier_rows(path: Path) -> Earlier:
    """The rows already in ``path``. A row counts only when whole and ended by its newline;
    from the first that is not (a row torn by a kill) the file is cut, so the resumed run
    appends on a fresh line."""
    earlier = Earlier()
    if not path.exists():
        return earlier
    text = path.read_text()
    good = 0
    for line in text.split("\n")[:-1]:  # the part after the last newline is unfinished
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                break
            if row.get("type") == "case":
                earlier.cases[(row["definition"], row["solution"], row.get("uuid"))] = row
            elif row.get("type") == "environment" and earlier.environment is None:
                earlier.environment = row
        good += len(line) + 1
    if good < len(text):
        with path.open("r+") as stream:
            stream.truncate(good)
    return earlier


class ResultWriter:
    def __init__(self, path: Path | None):
        self.path = path
        self.lock = threading.Lock()
        self.rows: list[dict[str, Any]] = []
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, row: CaseRow | EnvironmentRow) -> None:
        data = row.model_dump(mode="json", exclude_none=True)
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


def environment_row(devices: list[dict[str, Any]], **extra: Any) -> EnvironmentRow:
    gpus = {entry.get("index"): entry for entry in _nvidia_smi()}
    for device in devices:
        index = device.get("device", "").partition(":")[2]
        if index in gpus:
            device["nvidia_smi"] = gpus[index]
    return EnvironmentRow(
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        devices=devices,
        versions=library_versions(),
        **extra,
    )
