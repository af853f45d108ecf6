"""What a capture record says about the engine's output, and its verification."""

from __future__ import annotations

from pathlib import Path

import torch
from pydantic import ValidationError

from ..errors import DatasetError
from ..schema import CaptureRecord, Definition, SafetensorsInput, Workload
from . import blobs
from .shapes import declared_shape


def engine_outputs(
    definition: Definition, capture: CaptureRecord | None
) -> dict[str, SafetensorsInput] | None:
    """The engine-output descriptors a capture record names, by output name, or None.

    A record of a single-output definition holds the descriptor itself (as the seed's
    receipts do); otherwise a mapping from output name to descriptor.
    """
    stored = (capture.model_extra or {}).get("expected_output") if capture else None
    if stored is None:
        return None
    where = f"uuid {capture.uuid}.expected_output"
    if not isinstance(stored, dict):
        raise DatasetError("captures.jsonl", where, "neither a descriptor nor a mapping of them")
    if "type" in stored:
        stored = {next(iter(definition.outputs)): stored}
    descriptors = {}
    for name, value in stored.items():
        if name not in definition.outputs:
            raise DatasetError("captures.jsonl", f"{where}.{name}", "not an output")
        try:
            descriptors[name] = SafetensorsInput.model_validate(value)
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(part) for part in (name, *first["loc"]))
            raise DatasetError("captures.jsonl", f"{where}.{field}", first["msg"]) from None
    return descriptors


def load_engine_output(
    definition: Definition,
    workload: Workload,
    name: str,
    descriptor: SafetensorsInput,
    data_root: Path,
) -> torch.Tensor:
    """Engine output ``name``, checked against its hash and the declared shape and dtype."""
    from ..dtypes import dtype_name

    tensor, _ = blobs.load(data_root, descriptor)
    if problem := blobs.hash_problem(descriptor, tensor):
        raise DatasetError(descriptor.path, name, problem)
    shape = declared_shape(definition, workload, name)
    if list(tensor.shape) != shape:
        raise DatasetError(descriptor.path, name, f"shape {list(tensor.shape)}, declared {shape}")
    declared = definition.outputs[name].dtype
    if dtype_name(tensor.dtype) != declared:
        raise DatasetError(
            descriptor.path, name, f"dtype {dtype_name(tensor.dtype)}, declared {declared}"
        )
    return tensor
