"""Compile a definition's reference ``run`` and execute it in full FP32.

The reference is the truth a solution is judged against. It runs with TF32 disabled
(cuBLAS and cuDNN), and its outputs are checked against the declared shapes and
dtypes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .. import cpu_math
from ..acceptance import compare
from ..dataset.shapes import declared_shape
from ..dataset.signature import signature_problem
from ..dtypes import dtype_name, torch_dtype
from ..errors import DatasetError
from ..schema import Definition, Tolerance, Workload


def compile_reference(definition: Definition, function: str = "run") -> Callable[..., Any]:
    """The reference's ``run`` (or another function of its source, such as an ambiguity
    function a task names)."""
    problem = signature_problem(definition)
    if problem:
        raise DatasetError(definition.name, "reference", problem)
    cpu_math.warm()  # before any reference computes (the first sqrt of a process, cpu_math.py)
    namespace: dict[str, Any] = {"__name__": f"reference_{definition.name}"}
    exec(compile(definition.reference, f"<reference {definition.name}>", "exec"), namespace)
    if not callable(namespace.get(function)):
        raise DatasetError(definition.name, "reference", f"defines no function {function!r}")
    return namespace[function]


@contextlib.contextmanager
def full_fp32() -> Iterator[None]:
    """No TF32 anywhere while the reference runs; restores the previous settings."""
    precision = torch.get_float32_matmul_precision()
    cudnn_tf32 = torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(precision)
        torch.backends.cudnn.allow_tf32 = cudnn_tf32


def as_output_list(result: Any, definition: Definition) -> list[Any]:
    """A run's return value as a list in the definition's output order."""
    if isinstance(result, dict):
        return [result.get(name) for name in definition.outputs]
    if isinstance(result, (tuple, list)):
        return list(result)
    return [result]


def output_problems(
    definition: Definition, workload: Workload, outputs: list[Any], device: torch.device
) -> list[str]:
    """Shape, dtype, device and finiteness problems of reference outputs."""
    if len(outputs) != len(definition.outputs):
        return [f"returned {len(outputs)} outputs, declared {len(definition.outputs)}"]
    problems = []
    for (name, spec), value in zip(definition.outputs.items(), outputs, strict=True):
        if not isinstance(value, torch.Tensor):
            problems.append(f"{name}: returned {type(value).__name__}, not a tensor")
            continue
        shape = declared_shape(definition, workload, name)
        if list(value.shape) != shape:
            problems.append(f"{name}: shape {list(value.shape)}, declared {shape}")
        if value.dtype != torch_dtype(spec.dtype):
            problems.append(f"{name}: dtype {dtype_name(value.dtype)}, declared {spec.dtype}")
        if value.device.type != device.type:
            problems.append(f"{name}: on {value.device}, inputs on {device}")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            problems.append(f"{name}: has NaN or inf")
    return problems


def run_reference(definition: Definition, inputs: list[Any]) -> list[Any]:
    function = compile_reference(definition)
    with full_fp32(), torch.no_grad():
        return as_output_list(function(*inputs), definition)


def ambiguous_rows(
    definition: Definition, tolerance: Tolerance, inputs: list[Any], outputs: list[Any]
) -> torch.Tensor | None:
    """The rows the task's ambiguity function marks on these inputs (None when the task
    has none), checked: one bool per row of each output it names."""
    ambiguity = tolerance.ambiguity
    if ambiguity is None:
        return None
    function = compile_reference(definition, ambiguity.function)
    with full_fp32(), torch.no_grad():
        rows = function(*inputs, atol=tolerance.atol, rtol=tolerance.rtol)
    names = list(definition.outputs)
    for name in ambiguity.outputs:
        output = outputs[names.index(name)]
        if not (
            isinstance(rows, torch.Tensor)
            and rows.dtype == torch.bool
            and rows.dim() == 1
            and output.dim() >= 1
            and rows.shape[0] == output.shape[0]
            and rows.device == output.device
        ):
            raise DatasetError(
                definition.name,
                f"reference {ambiguity.function}",
                f"must return one bool per row of {name} on its device",
            )
    return rows


def rejected_rows(
    definition: Definition,
    tolerance: Tolerance,
    inputs: list[Any],
    produced: list[Any],
    marked: torch.Tensor,
) -> torch.Tensor | None:
    """The ``marked`` (ambiguous) rows whose produced values the task's ``accept`` function
    does not accept (None when the task has none: marked rows then go unchecked). The
    produced outputs have passed their shape, dtype and device checks; their values are a
    solution's, so the function must hold against any of them."""
    ambiguity = tolerance.ambiguity
    if ambiguity is None or ambiguity.accept is None:
        return None
    function = compile_reference(definition, ambiguity.accept)
    names = list(definition.outputs)
    named = [produced[names.index(name)] for name in ambiguity.outputs]
    with full_fp32(), torch.no_grad():
        accepted = function(*inputs, *named, rows=marked, atol=tolerance.atol, rtol=tolerance.rtol)
    if not (
        isinstance(accepted, torch.Tensor)
        and accepted.dtype == torch.bool
        and accepted.shape == marked.shape
        and accepted.device == marked.device
    ):
        raise DatasetError(
            definition.name,
            f"reference {ambiguity.accept}",
            f"must return one bool per row of {ambiguity.outputs[0]} on its device",
        )
    return marked & ~accepted


def rejections(
    definition: Definition,
    tolerance: Tolerance,
    inputs: list[Any],
    produced: list[Any],
    expected: list[Any],
) -> list[str]:
    """Why each produced output is rejected against its reference outputs ``expected`` on
    ``inputs`` ("" where it is accepted), as the referee holds a call to it
    (judge/referee.py): the task's ambiguous rows left out of the element-wise comparison,
    then held to its accept function, which rejects every output it names when it rejects
    a row."""
    rows = ambiguous_rows(definition, tolerance, inputs, expected)
    named = tolerance.ambiguity.outputs if tolerance.ambiguity else []
    verdicts = [
        compare(value, wanted, tolerance, rows if name in named else None)
        for name, value, wanted in zip(definition.outputs, produced, expected, strict=True)
    ]
    why = ["" if v.passed else f"{v.status}: {v.message}" for v in verdicts]
    if rows is not None and bool(rows.any()) and not any(why):
        rejected = rejected_rows(definition, tolerance, inputs, produced, rows)
        if rejected is not None and bool(rejected.any()):
            count = int(rejected.sum())
            why = [
                f"the task's accept function rejects {count} ambiguous rows" if n in named else ""
                for n in definition.outputs
            ]
    return why
