"""Import a capture directory into a dataset.

The capture must pass ``check``. Nothing is written until every conflict has been ruled
out: a definition of the same name with other content, or a uuid the dataset already
holds with another workload or receipt, refuses the whole import. Blobs are named by
their content, so one that the dataset already has is shared, not copied. Definitions,
tasks and solutions the dataset lacks are added; ones it has (and that agree) are kept.
Workload lines and receipts of new uuids are appended, the receipts last.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ..errors import DatasetError
from .check import check_dataset
from .layout import Dataset, load_dataset


def _lines_by_uuid(path: Path, uuid_of) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    return {uuid_of(record): record for record in map(json.loads, path.read_text().splitlines())}


def _receipts(dataset: Dataset) -> dict[str, dict[str, Any]]:
    return _lines_by_uuid(dataset.root / "captures.jsonl", lambda record: record["uuid"])


def _workload_lines(dataset: Dataset) -> dict[str, dict[str, Any]]:
    lines: dict[str, dict[str, Any]] = {}
    for path in dataset.workload_files.values():
        lines |= _lines_by_uuid(path, lambda record: record["workload"]["uuid"])
    return lines


def _append(path: Path, records: list[dict[str, Any]], sort_keys: bool = False) -> None:
    if not records:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as stream:
        for record in records:
            stream.write(json.dumps(record, sort_keys=sort_keys) + "\n")


def _copy_if_missing(source: Path, target: Path) -> bool:
    if target.exists():
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)
    return True


def merge(capture_root: Path, target_root: Path) -> dict[str, int]:
    """Merge ``capture_root`` into ``target_root``; returns counts of what was added."""
    capture = load_dataset(capture_root)
    report = check_dataset(capture)
    if not report.ok:
        first = report.problems[0]
        raise DatasetError(
            capture_root, "", f"{len(report.problems)} check problems, first: {first}"
        )
    Path(target_root).mkdir(parents=True, exist_ok=True)
    target = load_dataset(target_root)
    for name, definition in capture.definitions.items():
        known = target.definitions.get(name)
        if known is not None and known != definition:
            raise DatasetError(
                target.relative(target.definition_files[name]), "", "differs from the capture's"
            )
    lines, receipts = _workload_lines(capture), _receipts(capture)
    known_lines, known_receipts = _workload_lines(target), _receipts(target)
    new = []
    for uuid, line in lines.items():
        if uuid not in known_lines and uuid not in known_receipts:
            new.append(uuid)
        elif known_lines.get(uuid) != line or known_receipts.get(uuid) != receipts[uuid]:
            raise DatasetError(capture_root, f"workload {uuid}", "uuid conflicts with the dataset")
    counts = dict.fromkeys(
        (
            "definitions_added",
            "workloads_added",
            "workloads_present",
            "blobs_added",
            "blobs_shared",
            "tasks_added",
            "solutions_added",
        ),
        0,
    )
    counts["workloads_present"] = len(lines) - len(new)
    for path in capture.definition_files.values():
        relative = path.relative_to(capture.root)
        counts["definitions_added"] += _copy_if_missing(path, target.root / relative)
    for path in sorted((capture.root / "blob").rglob("*.safetensors")):
        added = _copy_if_missing(path, target.root / path.relative_to(capture.root))
        counts["blobs_added" if added else "blobs_shared"] += 1
    for folder, key in (("tasks", "tasks_added"), ("solutions", "solutions_added")):
        for path in sorted((capture.root / folder).rglob("*.json")):
            counts[key] += _copy_if_missing(path, target.root / path.relative_to(capture.root))
    for name, path in capture.workload_files.items():
        mine = [lines[u] for u in new if lines[u]["definition"] == name]
        _append(target.root / path.relative_to(capture.root), mine)
    _append(target.root / "captures.jsonl", [receipts[u] for u in new], sort_keys=True)
    counts["workloads_added"] = len(new)
    return counts
