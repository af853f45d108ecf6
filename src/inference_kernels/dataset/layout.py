"""Load a dataset root in the FlashInfer Trace layout, reporting problems instead of crashing.

    definitions/<op_type>/<name>.json        one Definition each
    workloads/<op_type>/<name>.jsonl         one TraceLine per line
    solutions/<family>/<name>.json           one Solution each
    tasks/<definition>.json                  one Task each (ours; peers have none)
    rooflines/<definition>.json              one Roofline each (ours: the least work)
    hardware/<device>.json                   one Hardware each (ours: measured peaks)
    preferred/<device>.json                  one Preferred each (measured choices per GPU)
    captures.jsonl                           one CaptureRecord per line (ours)
    blob/workloads/<definition>/<sha256>.safetensors

Every file is validated. A problem names the file (relative to the root) and the
field. When the only problems in an object are unknown keys, the object still loads
with those keys dropped, so that a peer's dataset can be used while its extra keys
are reported.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..errors import DatasetError, Problem
from ..schema import (
    CaptureRecord,
    Definition,
    Hardware,
    Preferred,
    Roofline,
    Solution,
    Task,
    TraceLine,
    Workload,
)
from .rooflines import problems as roofline_problems

M = TypeVar("M", bound=BaseModel)


@dataclass
class Dataset:
    root: Path
    definitions: dict[str, Definition] = field(default_factory=dict)
    definition_files: dict[str, Path] = field(default_factory=dict)
    workloads: dict[str, list[Workload]] = field(default_factory=dict)
    workload_files: dict[str, Path] = field(default_factory=dict)
    solutions: dict[str, Solution] = field(default_factory=dict)
    solution_files: dict[str, Path] = field(default_factory=dict)
    tasks: dict[str, Task] = field(default_factory=dict)
    rooflines: dict[str, Roofline] = field(default_factory=dict)
    hardware: dict[str, Hardware] = field(default_factory=dict)  # by device name
    preferred: dict[str, Preferred] = field(default_factory=dict)  # by device name
    captures: dict[str, CaptureRecord] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def definition(self, name: str) -> Definition:
        if name not in self.definitions:
            raise DatasetError(self.root, "definition", f"no definition named {name!r}")
        return self.definitions[name]

    def workload(self, definition: str, uuid: str) -> Workload:
        for workload in self.workloads.get(definition, []):
            if workload.uuid == uuid:
                return workload
        raise DatasetError(self.root, "workload", f"{definition} has no workload {uuid!r}")

    def find_workload(self, uuid: str) -> tuple[str, Workload]:
        for name, workloads in self.workloads.items():
            for workload in workloads:
                if workload.uuid == uuid:
                    return name, workload
        raise DatasetError(self.root, "workload", f"no workload with uuid {uuid!r}")

    def relative(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)


def _location(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _drop(data: Any, loc: tuple[Any, ...]) -> None:
    """Remove the key at ``loc`` from nested dicts/lists (pydantic error locations)."""
    for part in loc[:-1]:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return  # a union-branch tag in the location; nothing to walk
    if isinstance(data, dict):
        data.pop(loc[-1], None)


def _real_location(data: Any, loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Pydantic inserts union tags ("random", "const"...) into locations; drop them."""
    real: list[Any] = []
    for index, part in enumerate(loc):
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        elif index < len(loc) - 1:
            continue  # a tag, not a key of the data
        real.append(part)
    return tuple(real)


def parse(model: type[M], data: Any, file: str, prefix: str = "") -> tuple[M | None, list[Problem]]:
    """Validate ``data``; unknown keys are problems but do not stop the object loading."""
    try:
        return model.model_validate(data), []
    except ValidationError as error:
        errors = error.errors()
    problems = []
    only_unknown = all(e["type"] == "extra_forbidden" for e in errors)
    for e in errors:
        loc = _real_location(data, e["loc"])
        where = ".".join(p for p in (prefix, _location(loc)) if p)
        message = "unknown key" if e["type"] == "extra_forbidden" else e["msg"]
        problems.append(Problem(file, where, message))
        if only_unknown:
            _drop(data, loc)
    if only_unknown:
        try:
            return model.model_validate(data), problems
        except ValidationError:
            pass
    return None, problems


def read_json(path: Path, file: str) -> tuple[Any, list[Problem]]:
    try:
        return json.loads(path.read_text()), []
    except (OSError, UnicodeDecodeError) as error:
        return None, [Problem(file, "", f"cannot read: {error}")]
    except json.JSONDecodeError as error:
        return None, [Problem(file, f"line {error.lineno}", f"invalid JSON: {error.msg}")]


def read_jsonl(path: Path, file: str) -> Iterator[tuple[int, Any, list[Problem]]]:
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        yield 0, None, [Problem(file, "", f"cannot read: {error}")]
        return
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line), []
        except json.JSONDecodeError as error:
            yield number, None, [Problem(file, f"line {number}", f"invalid JSON: {error.msg}")]


def load_dataset(root: str | Path) -> Dataset:
    root = Path(root).resolve()
    if not root.is_dir():
        raise DatasetError(root, "", "dataset root is not a directory")
    dataset = Dataset(root)
    _load_definitions(dataset)
    _load_workloads(dataset)
    _load_solutions(dataset)
    _load_tasks(dataset)
    _load_rooflines(dataset)
    for _, file, hardware in _json_files(dataset, "hardware/*.json", Hardware):
        if hardware.device in dataset.hardware:
            dataset.problems.append(Problem(file, "device", "another file has this device"))
        dataset.hardware[hardware.device] = hardware
    _load_preferred(dataset)
    _load_captures(dataset)
    return dataset


def _json_files(dataset: Dataset, pattern: str, model: type[M]) -> Iterator[tuple[Path, str, M]]:
    """Each valid ``model`` among the files matching ``pattern``; problems are recorded."""
    for path in sorted(dataset.root.glob(pattern)):
        file = dataset.relative(path)
        data, problems = read_json(path, file)
        loaded, more = parse(model, data, file) if data is not None else (None, [])
        dataset.problems += problems + more
        if loaded is not None:
            yield path, file, loaded


def _load_definitions(dataset: Dataset) -> None:
    for path, file, definition in _json_files(dataset, "definitions/**/*.json", Definition):
        if path.stem != definition.name:
            dataset.problems.append(
                Problem(file, "name", f"{definition.name!r} differs from the file name")
            )
        if path.parent.name != definition.op_type:
            dataset.problems.append(
                Problem(file, "op_type", f"{definition.op_type!r} differs from the folder")
            )
        if definition.name in dataset.definitions:
            first = dataset.relative(dataset.definition_files[definition.name])
            dataset.problems.append(Problem(file, "name", f"also defined in {first}"))
            continue
        dataset.definitions[definition.name] = definition
        dataset.definition_files[definition.name] = path


def _load_workloads(dataset: Dataset) -> None:
    for path in sorted((dataset.root / "workloads").rglob("*.jsonl")):
        file = dataset.relative(path)
        name = path.stem
        dataset.workload_files[name] = path
        rows = dataset.workloads.setdefault(name, [])
        for number, data, problems in read_jsonl(path, file):
            dataset.problems += problems
            if data is None:
                continue
            line, more = parse(TraceLine, data, file, f"line {number}")
            dataset.problems += more
            if line is None:
                continue
            if line.definition != name:
                dataset.problems.append(
                    Problem(
                        file, f"line {number}.definition", f"{line.definition!r} in {name}.jsonl"
                    )
                )
            rows.append(line.workload)


def _load_solutions(dataset: Dataset) -> None:
    for path, file, solution in _json_files(dataset, "solutions/**/*.json", Solution):
        if solution.name in dataset.solutions:
            first = dataset.relative(dataset.solution_files[solution.name])
            dataset.problems.append(Problem(file, "name", f"also defined in {first}"))
            continue
        dataset.solutions[solution.name] = solution
        dataset.solution_files[solution.name] = path


def _load_tasks(dataset: Dataset) -> None:
    for path, file, task in _json_files(dataset, "tasks/*.json", Task):
        if path.stem != task.definition:
            dataset.problems.append(
                Problem(file, "definition", f"{task.definition!r} differs from the file name")
            )
        dataset.tasks[task.definition] = task


def _load_rooflines(dataset: Dataset) -> None:
    for path, file, roofline in _json_files(dataset, "rooflines/*.json", Roofline):
        found = roofline_problems(roofline, dataset.definitions, file)
        if path.stem != roofline.definition:
            found.append(Problem(file, "definition", "differs from the file name"))
        dataset.problems += found
        if not found:
            dataset.rooflines[roofline.definition] = roofline


def _load_preferred(dataset: Dataset) -> None:
    """``preferred/*.json``: one file per GPU, each choice a solution of its definition."""
    for _, file, chosen in _json_files(dataset, "preferred/*.json", Preferred):
        found = []
        if chosen.device is None:
            found.append(Problem(file, "device", "names no one GPU: a file is for one device"))
        elif chosen.device in dataset.preferred:
            found.append(Problem(file, "device", "another file has this device"))
        seen = set()
        for i, choice in enumerate(chosen.definitions):
            where = f"definitions[{i}]"
            if choice.definition not in dataset.definitions:
                found.append(Problem(file, f"{where}.definition", "no such definition"))
            if choice.definition in seen:
                found.append(Problem(file, f"{where}.definition", "chosen twice"))
            seen.add(choice.definition)
            named = [(f"{where}.solution", choice.solution)]
            named += [(f"{where}.versus[{j}]", v.solution) for j, v in enumerate(choice.versus)]
            for field_name, name in named:
                solution = dataset.solutions.get(name)
                if solution is None or solution.definition != choice.definition:
                    found.append(
                        Problem(file, field_name, f"{name!r} is no solution of the definition")
                    )
        dataset.problems += found
        if not found:
            dataset.preferred[chosen.device] = chosen


def _load_captures(dataset: Dataset) -> None:
    path = dataset.root / "captures.jsonl"
    if not path.exists():
        return
    file = dataset.relative(path)
    for number, data, problems in read_jsonl(path, file):
        dataset.problems += problems
        if data is None:
            continue
        record, more = parse(CaptureRecord, data, file, f"line {number}")
        dataset.problems += more
        if record is None:
            continue
        if record.uuid in dataset.captures:
            dataset.problems.append(Problem(file, f"line {number}.uuid", "duplicate uuid"))
            continue
        dataset.captures[record.uuid] = record
