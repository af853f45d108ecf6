"""Which workloads a command runs on: by definition, suite and uuid."""

from __future__ import annotations

import math
from typing import Literal

from ..dtypes import torch_dtype
from ..errors import DatasetError
from ..schema import Definition, Workload
from .layout import Dataset
from .shapes import declared_shape

Suite = Literal["first", "dev", "all"]


def input_bytes(definition: Definition, workload: Workload) -> int:
    """Bytes of all tensor inputs: the size used to rank workloads."""
    total = 0
    for name, spec in definition.inputs.items():
        if spec.shape is not None:
            size = math.prod(declared_shape(definition, workload, name))
            total += size * torch_dtype(spec.dtype).itemsize
    return total


def select(
    dataset: Dataset,
    definitions: list[str] | None = None,
    suite: Suite = "first",
    uuids: list[str] | None = None,
) -> list[tuple[Definition, Workload]]:
    """(definition, workload) pairs in dataset order.

    first: each definition's smallest workload (fewest input bytes; the earliest on a
    tie); dev: the task's dev uuids; all: every workload. ``uuids`` narrows any suite
    and, given alone, selects those workloads wherever they are.
    """
    for name in definitions or []:
        dataset.definition(name)  # raises, naming the unknown definition
    wanted = set(uuids or [])
    known = {w.uuid for ws in dataset.workloads.values() for w in ws}
    for uuid in sorted(wanted - known):
        raise DatasetError(dataset.root, "workload", f"no workload with uuid {uuid!r}")
    chosen = []
    for name in sorted(dataset.definitions):
        if definitions and name not in definitions:
            continue
        definition = dataset.definitions[name]
        workloads = dataset.workloads.get(name, [])
        if wanted:
            picked = [w for w in workloads if w.uuid in wanted]
        elif suite == "first":
            picked = [min(workloads, key=lambda w: input_bytes(definition, w))] if workloads else []
        elif suite == "dev":
            task = dataset.tasks.get(name)
            dev = set(task.dev) if task else set()
            picked = [w for w in workloads if w.uuid in dev]
        else:
            picked = list(workloads)
        chosen += [(definition, workload) for workload in picked]
    return chosen
