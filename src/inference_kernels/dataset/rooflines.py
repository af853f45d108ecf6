"""The least work of a workload: the FLOPs and the bytes any kernel for its definition
must spend on it (issue 14's speed of light).

A definition's roofline is data, ``rooflines/<definition>.json`` (``schema.Roofline``):
expressions in the constraint language over the definition's axes and, where the work
depends on them (the valid indices of a sparse or paged definition), its inputs' values;
``let`` names steps, evaluated in order. FLOPs count a multiply-add as two; bytes count
each input read once and each output written once (the default, from the definition's
shapes and dtypes), or what the expression says (a sparse kernel reads only the rows its
indices name). Adding a definition adds a file, not code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ..dtypes import TORCH_DTYPES
from ..errors import Problem
from ..schema import Definition, Hardware, Roofline
from .constraints import ConstraintSyntaxError, compute, parse


@dataclass(frozen=True)
class Work:
    flops: int
    bytes: int

    def intensity(self) -> float:
        """FLOPs per byte."""
        return self.flops / self.bytes if self.bytes else math.inf


@dataclass(frozen=True)
class Limit:
    """The least time a workload's work takes on a device, and what sets it."""

    us: float
    bound: str  # "compute", "memory" or "launch" (one empty kernel in a CUDA graph)


def speed_of_light(done: Work, math_: str, hardware: Hardware) -> Limit:
    """The longest of the work's FLOPs at the device's peak for ``math_``, its bytes at the
    memory bandwidth, and one empty kernel: no kernel can take less."""
    times = {
        "compute": done.flops / (hardware.tflops[math_] * 1e6),  # TFLOP/s -> FLOP per us
        "memory": done.bytes / (hardware.memory_tb_s * 1e6),
        "launch": hardware.empty_kernel_us,
    }
    bound = max(times, key=times.__getitem__)
    return Limit(times[bound], bound)


def element_bytes(dtype: str) -> float:
    """Bytes per element of a definition dtype (a packed FP4 pair is one byte: 0.5)."""
    torch_dtype = TORCH_DTYPES[dtype]
    size = torch.empty((), dtype=torch_dtype).element_size()
    return size / 2 if torch_dtype == getattr(torch, "float4_e2m1fn_x2", None) else size


def io_bytes(definition: Definition, axes: dict[str, int]) -> int:
    """Every input read once and every output written once (a scalar is one element)."""
    total = 0.0
    for spec in (*definition.inputs.values(), *definition.outputs.values()):
        elements = math.prod(axes[axis] for axis in spec.shape or [])
        total += elements * element_bytes(spec.dtype)
    return int(total)


def work(
    roofline: Roofline,
    definition: Definition,
    axes: dict[str, int],
    inputs: dict[str, Any] | None = None,
) -> Work:
    """The roofline's FLOPs and bytes for one workload (``axes``: all of them, constant and
    variable; ``inputs``: values by name, needed only by expressions that read them).
    Raises ValueError naming the step that failed."""
    read = set().union(*(parse(e)[1] for e in _expressions(roofline)))
    # Only the inputs the expressions read, on the CPU (small: indices, lengths, ids; and
    # ``arange`` makes CPU tensors, which a CUDA tensor would not compare with).
    values = {
        k: v.cpu() if isinstance(v, torch.Tensor) else v
        for k, v in (inputs or {}).items()
        if k in read
    }
    scope: dict[str, Any] = {**axes, **values}
    for name, expression in roofline.let.items():
        scope[name] = _value(expression, scope, f"let.{name}")
    flops = _count(_value(roofline.flops, scope, "flops"), "flops")
    if roofline.bytes is None:
        return Work(flops, io_bytes(definition, axes))
    return Work(flops, _count(_value(roofline.bytes, scope, "bytes"), "bytes"))


def _expressions(roofline: Roofline) -> list[str]:
    found = [*roofline.let.values(), roofline.flops]
    return found + ([roofline.bytes] if roofline.bytes is not None else [])


def _value(expression: str, scope: dict[str, Any], field: str) -> Any:
    try:
        return compute(expression, scope)
    except (ConstraintSyntaxError, ValueError) as error:
        raise ValueError(f"{field}: {error}") from None


def _count(value: Any, field: str) -> int:
    """A whole, nonnegative number (a one-element tensor is one)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{field}: {value!r} is not a count")
    return int(value)


def problems(roofline: Roofline, definitions: dict[str, Definition], file: str) -> list[Problem]:
    """What is wrong with a roofline file: an unknown definition, an expression outside the
    language, or a name that is none of the definition's axes and inputs nor an earlier
    step."""
    definition = definitions.get(roofline.definition)
    if definition is None:
        return [Problem(file, "definition", f"no definition named {roofline.definition!r}")]
    known = set(definition.axes) | set(definition.inputs)
    found = []
    steps = [(f"let.{name}", expression) for name, expression in roofline.let.items()]
    steps += [("flops", roofline.flops)]
    steps += [("bytes", roofline.bytes)] if roofline.bytes is not None else []
    for field, expression in steps:
        try:
            _, names = parse(expression)
        except ConstraintSyntaxError as error:
            found.append(Problem(file, field, str(error)))
            continue
        if unknown := sorted(names - known):
            found.append(Problem(file, field, f"unknown name(s): {', '.join(unknown)}"))
        if field.startswith("let."):
            known.add(field.removeprefix("let."))
    return found
