"""Concrete shapes of a definition's tensors for one workload, and their verification."""

from __future__ import annotations

import torch

from ..dtypes import dtype_name, torch_dtype
from ..errors import DatasetError
from ..schema import Definition, Workload


def dims(definition: Definition, workload: Workload) -> dict[str, int]:
    return {**definition.const_axes(), **workload.axes}


def declared_shape(definition: Definition, workload: Workload, name: str) -> list[int]:
    """The shape of input or output ``name`` under this workload's axes."""
    spec = definition.inputs.get(name) or definition.outputs[name]
    sizes = dims(definition, workload)
    return [sizes[axis] for axis in spec.shape or []]


def verify_tensor(
    definition: Definition, workload: Workload, name: str, tensor: torch.Tensor, where: str
) -> None:
    """Raise DatasetError if ``tensor`` is not the declared shape and dtype of input ``name``."""
    spec = definition.inputs[name]
    shape = declared_shape(definition, workload, name)
    if list(tensor.shape) != shape:
        raise DatasetError(where, name, f"shape {list(tensor.shape)}, declared {shape}")
    if tensor.dtype != torch_dtype(spec.dtype):
        raise DatasetError(where, name, f"dtype {dtype_name(tensor.dtype)}, declared {spec.dtype}")
