"""Import a capture directory into a dataset.

The capture must pass ``check`` and give every workload a receipt. Nothing is written
until every conflict has been ruled out: a definition of the same name with other
content, or a uuid the dataset holds with another workload or receipt, refuses the whole
import. Blobs are named by their content, so one that the dataset already has (whole) is
shared, not copied; files are copied atomically. Definitions, tasks and solutions the
dataset lacks are added; ones it has are kept. Workload lines, then receipts, of new uuids
are appended, each line fsynced; an import that was interrupted is completed by running it
again (a uuid whose records are present and identical counts as imported).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import DatasetError
from .check import check_dataset
from .files import append_line, write_atomically
from .layout import Dataset, load_dataset


def _lines_by_uuid(path: Path, uuid_of) -> dict[str, dict[str, Any]]:
    records = {}
    if not path.exists():
        return records
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            record = json.loads(line)
            records[uuid_of(record)] = record
        except (json.JSONDecodeError, TypeError, KeyError):
            raise DatasetError(path, f"line {number}", "not a record with a uuid") from None
    return records


def _receipts(dataset: Dataset) -> dict[str, dict[str, Any]]:
    return _lines_by_uuid(dataset.root / "captures.jsonl", lambda record: record["uuid"])


def _workload_lines(dataset: Dataset) -> dict[str, dict[str, Any]]:
    lines: dict[str, dict[str, Any]] = {}
    for path in dataset.workload_files.values():
        lines |= _lines_by_uuid(path, lambda record: record["workload"]["uuid"])
    return lines


def _append(path: Path, records: list[dict[str, Any]], sort_keys: bool = False) -> None:
    for record in records:
        append_line(path, record, sort_keys)


def _copy(source: Path, target: Path, whole_if_same_size: bool = False) -> bool:
    """Copy ``source`` to ``target`` atomically unless it is there; a blob of another size
    (cut short by a crash) is replaced. Returns whether it copied."""
    if target.exists() and (
        not whole_if_same_size or target.stat().st_size == source.stat().st_size
    ):
        return False
    write_atomically(target, source.read_bytes())
    return True


def _plan(
    capture: Dataset, target: Dataset, lines: dict[str, dict], receipts: dict[str, dict]
) -> tuple[list[str], list[str], int]:
    """(uuids whose workload line is missing, uuids whose receipt is missing, uuids present)."""
    for uuid in lines:
        if uuid not in receipts:
            raise DatasetError(
                capture.root, f"workload {uuid}", "has no receipt: an interrupted capture"
            )
    known_lines, known_receipts = _workload_lines(target), _receipts(target)
    need_line, need_receipt, present = [], [], 0
    for uuid, line in lines.items():
        have_line, have_receipt = known_lines.get(uuid), known_receipts.get(uuid)
        if have_line not in (None, line) or have_receipt not in (None, receipts[uuid]):
            raise DatasetError(capture.root, f"workload {uuid}", "uuid conflicts with the dataset")
        if have_line is None:
            need_line.append(uuid)
        if have_receipt is None:
            need_receipt.append(uuid)
        present += have_line is not None and have_receipt is not None
    return need_line, need_receipt, present


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
    need_line, need_receipt, present = _plan(capture, target, lines, receipts)
    counts = dict.fromkeys(
        ("definitions_added", "blobs_added", "blobs_shared", "tasks_added", "solutions_added"),
        0,
    )
    for path in capture.definition_files.values():
        counts["definitions_added"] += _copy(path, target.root / path.relative_to(capture.root))
    for path in sorted((capture.root / "blob").rglob("*.safetensors")):
        added = _copy(path, target.root / path.relative_to(capture.root), whole_if_same_size=True)
        counts["blobs_added" if added else "blobs_shared"] += 1
    for folder, key in (("tasks", "tasks_added"), ("solutions", "solutions_added")):
        for path in sorted((capture.root / folder).rglob("*.json")):
            counts[key] += _copy(path, target.root / path.relative_to(capture.root))
    for name, path in capture.workload_files.items():
        mine = [lines[u] for u in need_line if lines[u]["definition"] == name]
        _append(target.root / path.relative_to(capture.root), mine)
    _append(target.root / "captures.jsonl", [receipts[u] for u in need_receipt], sort_keys=True)
    counts["workloads_added"] = len(need_receipt)
    counts["workloads_present"] = present
    return counts
