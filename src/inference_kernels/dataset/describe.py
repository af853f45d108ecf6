"""Everything a solution author needs to know of one definition, in one place: the call
signature, every input and output with its shape and dtype, the axes (constant values,
and the range the workloads span), constraints, the least work of a workload (its
roofline, where the dataset has one), the task's tolerance and timing, the solutions the
dataset holds for it, and the one preferred on each GPU where the dataset says."""

from __future__ import annotations

from typing import Any

from ..schema import ConstAxis, TensorSpec
from .layout import Dataset


def _tensor(spec: TensorSpec) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "shape": spec.shape,  # axis names; None: a Python scalar
        "dtype": spec.dtype,
    }
    if spec.optional:
        entry["optional"] = True
    if spec.description:
        entry["description"] = spec.description
    return entry


def describe(dataset: Dataset, name: str) -> dict[str, Any]:
    definition = dataset.definition(name)
    workloads = dataset.workloads.get(name, [])
    task = dataset.tasks.get(name)
    axes: dict[str, Any] = {}
    for axis, spec in definition.axes.items():
        if isinstance(spec, ConstAxis):
            axes[axis] = {"const": spec.value}
        else:
            seen = [w.axes[axis] for w in workloads if axis in w.axes]
            axes[axis] = {"var": [min(seen), max(seen)] if seen else None}
        if spec.description:
            axes[axis]["description"] = spec.description
    inputs, outputs = list(definition.inputs), list(definition.outputs)
    returned = outputs[0] if len(outputs) == 1 else f"({', '.join(outputs)})"
    return {
        "name": name,
        "op_type": definition.op_type,
        "description": definition.description,
        "signature": f"run({', '.join(inputs)}) -> {returned}",
        "signature_dps": f"run({', '.join(inputs + outputs)}) -> None",
        "axes": axes,
        "inputs": {k: _tensor(v) for k, v in definition.inputs.items()},
        "outputs": {k: _tensor(v) for k, v in definition.outputs.items()},
        "constraints": definition.constraints,
        "roofline": roofline.model_dump(exclude={"definition"}, exclude_none=True)
        if (roofline := dataset.rooflines.get(name))
        else None,
        "workloads": len(workloads),
        "solutions": sorted(s.name for s in dataset.solutions.values() if s.definition == name),
        "preferred": {
            device: {
                "solution": choice.solution,
                "time_us": choice.time_us,
                "speedup_over_baseline": choice.speedup_over_baseline,
                "workloads": choice.workloads,
                "inputs": choice.inputs,
            }
            for device, chosen in sorted(dataset.preferred.items())
            for choice in chosen.definitions
            if choice.definition == name
        },
        "task": None
        if task is None
        else {
            "tolerance": task.tolerance.model_dump(exclude_none=True),
            "timing": task.timing.model_dump(),
            "baseline": task.baseline,
            "dev_workloads": len(task.dev),
        },
    }
