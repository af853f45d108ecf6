"""Write selected workloads as a self-contained dataset whose tensors are safetensors blobs.

The output holds, for each selected definition, its definition, task and solution
files, the selected workloads (every ``random`` input written as a stand-in blob, labelled in
the blob's metadata; existing blobs copied), and their capture records. The task's
dev list keeps only the selected uuids, so the subset passes ``check`` on its own.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ..dataset import blobs
from ..dataset.layout import Dataset
from ..schema import Definition, SafetensorsInput, Workload
from .inputs import write_standins


def _copy_blob(source_root: Path, output: Path, descriptor: SafetensorsInput) -> None:
    target = output / descriptor.path
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(blobs.resolve(source_root, descriptor), target)


def export_dataset(
    dataset: Dataset,
    cases: list[tuple[Definition, Workload]],
    output: Path,
    data_root: Path | None = None,
) -> dict:
    data_root = data_root or dataset.root
    by_definition: dict[str, list[Workload]] = {}
    blob_count = 0
    for definition, workload in cases:
        exported = write_standins(definition, workload, output, dataset.captures.get(workload.uuid))
        for descriptor in exported.inputs.values():
            if isinstance(descriptor, SafetensorsInput):
                _copy_blob(data_root, output, descriptor)
                blob_count += 1
        by_definition.setdefault(definition.name, []).append(exported)
    for name, workloads in by_definition.items():
        source = dataset.definition_files[name]
        target = output / source.relative_to(dataset.root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        op_type = dataset.definitions[name].op_type
        lines = [
            {"definition": name, "workload": w.model_dump(), "solution": None, "evaluation": None}
            for w in workloads
        ]
        workload_file = output / "workloads" / op_type / f"{name}.jsonl"
        workload_file.parent.mkdir(parents=True, exist_ok=True)
        workload_file.write_text("".join(json.dumps(line) + "\n" for line in lines))
        for solution, path in dataset.solution_files.items():
            if dataset.solutions[solution].definition == name:
                target = output / path.relative_to(dataset.root)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
        if name in dataset.rooflines:  # the least work goes with its definition
            (output / "rooflines").mkdir(parents=True, exist_ok=True)
            data = dataset.rooflines[name].model_dump(exclude_none=True)
            (output / "rooflines" / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
        if name in dataset.tasks:
            selected = {w.uuid for w in workloads}
            task = dataset.tasks[name]
            task = task.model_copy(update={"dev": [u for u in task.dev if u in selected]})
            (output / "tasks").mkdir(parents=True, exist_ok=True)
            data = task.model_dump(exclude_none=True)
            (output / "tasks" / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
    uuids = [w.uuid for ws in by_definition.values() for w in ws]
    if dataset.captures:
        records = [dataset.captures[u].model_dump() for u in uuids if u in dataset.captures]
        (output / "captures.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return {
        "output": str(output),
        "definitions": len(by_definition),
        "workloads": len(uuids),
        "blobs": blob_count,
    }
