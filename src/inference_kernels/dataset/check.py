"""Check a dataset: layout and schema, references, constraints, tasks, captures, blobs.

Everything found is returned as a list of problems, each naming a file and a field;
nothing stops at the first one. Blobs are read only where they exist, and then their
content hash, shape and dtype are verified and value constraints are evaluated. The
engine outputs of captures whose captured inputs ship are verified the same way.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DatasetError, Problem
from ..schema import CaptureRecord, Definition, SafetensorsInput, ScalarInput, Task, Workload
from . import blobs, constraints, receipts
from .layout import Dataset
from .shapes import dims
from .signature import signature_problem


@dataclass
class CheckReport:
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_dataset(
    dataset: Dataset,
    data_root: Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> CheckReport:
    """All problems of ``dataset``; ``progress(n)`` is called as blobs are verified."""
    data_root = data_root or dataset.root
    report = CheckReport(problems=list(dataset.problems))
    problems = report.problems
    for name, definition in dataset.definitions.items():
        problems += _definition_problems(dataset, name, definition)
    seen: dict[str, str] = {}
    blob_count = 0
    for name, workloads in dataset.workloads.items():
        file = dataset.relative(dataset.workload_files[name])
        definition = dataset.definitions.get(name)
        if definition is None:
            problems.append(Problem(file, "definition", f"no definition named {name!r}"))
            continue
        for workload in workloads:
            where = f"workload {workload.uuid}"
            if workload.uuid in seen:
                problems.append(Problem(file, where, f"uuid also used in {seen[workload.uuid]}"))
            seen[workload.uuid] = file
            problems += _workload_problems(definition, workload, file, where)
            blobs = [d for d in workload.inputs.values() if isinstance(d, SafetensorsInput)]
            if blobs:
                problems += _blob_problems(definition, workload, data_root, file, where)
                blob_count += len(blobs)
                if progress:
                    progress(len(blobs))
    problems += _task_problems(dataset)
    problems += _capture_problems(dataset, data_root)
    for name, solution in dataset.solutions.items():
        if solution.definition not in dataset.definitions:
            file = dataset.relative(dataset.solution_files[name])
            problems.append(Problem(file, "definition", f"no definition {solution.definition!r}"))
    report.counts = {
        "definitions": len(dataset.definitions),
        "tasks": len(dataset.tasks),
        "workloads": sum(len(w) for w in dataset.workloads.values()),
        "captures": len(dataset.captures),
        "solutions": len(dataset.solutions),
        "blobs_verified": blob_count,
    }
    return report


def _definition_problems(dataset: Dataset, name: str, definition: Definition) -> list[Problem]:
    file = dataset.relative(dataset.definition_files[name])
    problems = []
    if problem := signature_problem(definition):
        problems.append(Problem(file, "reference", problem))
    for index, expression in enumerate(definition.constraints):
        try:
            _, names = constraints.parse(expression)
        except constraints.ConstraintSyntaxError as error:
            problems.append(Problem(file, f"constraints[{index}]", f"{expression!r}: {error}"))
            continue
        unknown = names - set(definition.axes) - set(definition.inputs)
        if unknown:
            problems.append(
                Problem(file, f"constraints[{index}]", f"{expression!r} names {sorted(unknown)}")
            )
        elif not names & set(definition.inputs):
            verdict = constraints.evaluate(expression, definition.const_axes())
            if verdict is False:
                problems.append(Problem(file, f"constraints[{index}]", f"{expression!r} is false"))
    return problems


def _workload_problems(
    definition: Definition, workload: Workload, file: str, where: str
) -> list[Problem]:
    problems = []
    declared = set(definition.var_axes())
    for axis in sorted(declared - set(workload.axes)):
        problems.append(Problem(file, f"{where}.axes.{axis}", "missing"))
    for axis in sorted(set(workload.axes) - declared):
        problems.append(Problem(file, f"{where}.axes.{axis}", "not a var axis of the definition"))
    for name in sorted(set(workload.inputs) - set(definition.inputs)):
        problems.append(Problem(file, f"{where}.inputs.{name}", "not an input of the definition"))
    for name, spec in definition.inputs.items():
        descriptor = workload.inputs.get(name)
        if descriptor is None:
            if not spec.optional:
                problems.append(Problem(file, f"{where}.inputs.{name}", "missing"))
        elif spec.shape is None and not isinstance(descriptor, ScalarInput):
            problems.append(Problem(file, f"{where}.inputs.{name}", "a scalar input needs a value"))
        elif spec.shape is not None and isinstance(descriptor, ScalarInput):
            problems.append(Problem(file, f"{where}.inputs.{name}", "a tensor input has a scalar"))
    if declared == set(workload.axes):
        values = {**definition.const_axes(), **workload.axes}
        problems += _constraint_problems(
            definition, values, file, where, _declared_shapes(definition, workload)
        )
    return problems


def _declared_shapes(definition: Definition, workload: Workload) -> dict[str, list[int]]:
    """The shapes of the tensor inputs the workload gives, from its axes: enough for the
    constraints that read inputs only through ``.shape``."""
    sizes = dims(definition, workload)
    return {
        name: [sizes[axis] for axis in spec.shape]
        for name, spec in definition.inputs.items()
        if spec.shape is not None
        and set(spec.shape) <= set(sizes)
        and name in workload.inputs
        and not isinstance(workload.inputs[name], ScalarInput)
    }


def _constraint_problems(
    definition: Definition,
    values: dict,
    file: str,
    where: str,
    shapes: dict | None = None,
    only_value_constraints: bool = False,
) -> list[Problem]:
    problems = []
    for expression in definition.constraints:
        try:
            if only_value_constraints and not constraints.needs_values(
                expression, set(definition.inputs)
            ):
                continue  # evaluated already from the axes and declared shapes
            verdict = constraints.evaluate(expression, values, shapes)
        except ValueError as error:  # a syntax error is reported once, per definition
            if not isinstance(error, constraints.ConstraintSyntaxError):
                problems.append(Problem(file, where, f"constraint {expression!r}: {error}"))
            continue
        if verdict is False:
            problems.append(Problem(file, where, f"violates {expression!r}"))
    return problems


def _blob_problems(
    definition: Definition, workload: Workload, data_root: Path, file: str, where: str
) -> list[Problem]:
    problems = []
    values: dict[str, object] = {**definition.const_axes(), **workload.axes}
    for name, descriptor in workload.inputs.items():
        if isinstance(descriptor, ScalarInput):
            values[name] = descriptor.value
        elif isinstance(descriptor, SafetensorsInput) and name in definition.inputs:
            try:
                values[name], _ = blobs.load_verified(
                    definition, workload, name, descriptor, data_root
                )
            except DatasetError as error:
                problems.append(Problem(file, f"{where}.inputs.{name}", str(error.problem)))
    if not problems:
        shapes = _declared_shapes(definition, workload)
        problems += _constraint_problems(
            definition, values, file, where, shapes, only_value_constraints=True
        )
    return problems


def _task_problems(dataset: Dataset) -> list[Problem]:
    problems = []
    has_tasks = (dataset.root / "tasks").is_dir()
    for name in dataset.definitions:
        if has_tasks and name not in dataset.tasks:
            problems.append(
                Problem(f"tasks/{name}.json", "", "missing: every definition needs a task")
            )
    for name, task in dataset.tasks.items():
        file = f"tasks/{name}.json"
        if name not in dataset.definitions:
            problems.append(Problem(file, "definition", f"no definition named {name!r}"))
            continue
        uuids: set[str] = set()
        for index, path in enumerate(task.workloads):
            target = (dataset.root / path).resolve()
            if not target.is_file() or target.stem != name:
                problems.append(
                    Problem(file, f"workloads[{index}]", f"{path!r} is not {name}'s file")
                )
            else:
                uuids |= {w.uuid for w in dataset.workloads.get(name, [])}
        for index, uuid in enumerate(task.dev):
            if uuid not in uuids:
                problems.append(
                    Problem(file, f"dev[{index}]", f"{uuid} is not one of its workloads")
                )
        if len(set(task.dev)) != len(task.dev):
            problems.append(Problem(file, "dev", "lists a uuid twice"))
        problems += _ambiguity_problems(file, task, dataset.definitions[name])
        if task.baseline is not None:
            solution = dataset.solutions.get(task.baseline)
            if solution is None:
                problems.append(Problem(file, "baseline", f"no solution named {task.baseline!r}"))
            elif solution.definition != name:
                problems.append(Problem(file, "baseline", f"solves {solution.definition!r}"))
    return problems


def _ambiguity_problems(file: str, task: Task, definition: Definition) -> list[Problem]:
    """The task's ambiguity names a function of the reference and outputs of the definition."""
    ambiguity = task.tolerance.ambiguity
    if ambiguity is None:
        return []
    problems = [
        Problem(file, f"tolerance.ambiguity.outputs[{index}]", f"{name!r} is not an output")
        for index, name in enumerate(ambiguity.outputs)
        if name not in definition.outputs
    ]
    try:
        tree = ast.parse(definition.reference)
    except SyntaxError:
        return problems  # the reference's own problem, reported with the definition
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    for key, function in (("function", ambiguity.function), ("accept", ambiguity.accept)):
        if function is not None and function not in defined:
            problems.append(
                Problem(
                    file,
                    f"tolerance.ambiguity.{key}",
                    f"{definition.name}'s reference defines no function {function!r}",
                )
            )
    return problems


def _engine_output_problems(
    definition: Definition, workload: Workload, record: CaptureRecord, data_root: Path
) -> list[Problem]:
    """A capture whose captured inputs ship must ship its engine outputs too, intact. (The
    seed's receipts name engine outputs that are not shipped, with stand-in inputs or
    exported stand-in blobs: not a problem.)"""
    try:
        descriptors = receipts.engine_outputs(definition, record)
    except DatasetError as error:
        return [error.problem]
    captured = any(
        isinstance(d, SafetensorsInput) and blobs.origin(data_root, d) == "captured"
        for d in workload.inputs.values()
    )
    if descriptors is None or not captured:
        return []
    problems = []
    for name, descriptor in descriptors.items():
        try:
            receipts.load_engine_output(definition, workload, name, descriptor, data_root)
        except (DatasetError, KeyError) as error:
            text = str(error.problem) if isinstance(error, DatasetError) else f"no output {error}"
            problems.append(Problem("captures.jsonl", f"uuid {record.uuid}.expected_output", text))
    return problems


def _capture_problems(dataset: Dataset, data_root: Path) -> list[Problem]:
    if not (dataset.root / "captures.jsonl").exists():
        return []
    problems = []
    file = "captures.jsonl"
    workloads = {w.uuid: (name, w) for name, ws in dataset.workloads.items() for w in ws}
    for uuid, record in dataset.captures.items():
        if uuid not in workloads:
            problems.append(Problem(file, f"uuid {uuid}", "no workload has this uuid"))
            continue
        name, workload = workloads[uuid]
        if record.definition != name:
            problems.append(
                Problem(file, f"uuid {uuid}.definition", f"{record.definition} != {name}")
            )
        if record.axes != workload.axes:
            problems.append(Problem(file, f"uuid {uuid}.axes", f"{record.axes} != {workload.axes}"))
        elif name in dataset.definitions:
            definition = dataset.definitions[name]
            problems += _engine_output_problems(definition, workload, record, data_root)
    for uuid, (name, _) in workloads.items():
        if uuid not in dataset.captures:
            problems.append(
                Problem(file, f"uuid {uuid}", f"workload of {name} has no capture record")
            )
    return problems
