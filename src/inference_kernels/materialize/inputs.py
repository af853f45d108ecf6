"""Turn a workload into the definition's inputs, in order, on a chosen device.

A ``safetensors`` input is loaded and its content hash, shape and dtype verified; a
``scalar`` input is its value; a ``random`` input comes from the definition's
stand-in generator. Each input's origin is kept (``captured``, ``stand-in`` or
``scalar``) so that every result can say what it ran on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..dataset import blobs
from ..dataset.shapes import verify_tensor
from ..host_to_device import to_device
from ..schema import CaptureRecord, Definition, RandomInput, SafetensorsInput, ScalarInput, Workload
from . import standins

CAPTURED, STANDIN, SCALAR = "captured", "stand-in", "scalar"


@dataclass
class Materialized:
    names: list[str]
    values: list[Any]
    origins: dict[str, str]
    generator: str | None = None
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def origin(self) -> str:
        """``captured``, ``stand-in``, or ``mixed`` over the tensor inputs."""
        kinds = {origin for origin in self.origins.values() if origin != SCALAR}
        if kinds <= {CAPTURED}:
            return CAPTURED
        return STANDIN if kinds == {STANDIN} else "mixed"

    def to(self, device: str | torch.device) -> Materialized:
        """The same inputs with every tensor on ``device`` (made on the CPU elsewhere:
        judge/prefetch.py, which leaves model parameters, kept per device, to
        ``materialize``)."""
        tensors = [v for v in self.values if isinstance(v, torch.Tensor)]
        moved = iter(to_device(tensors, torch.device(device)))
        values = [next(moved) if isinstance(v, torch.Tensor) else v for v in self.values]
        return Materialized(self.names, values, self.origins, self.generator, self.metadata)

    def nbytes(self) -> int:
        return sum(v.numel() * v.element_size() for v in self.values if isinstance(v, torch.Tensor))


def draws(definition: Definition, workload: Workload) -> bool:
    """Whether ``materialize`` draws stand-ins for the workload: an input that is
    ``random``, or absent and not optional (its last branch)."""
    return any(
        not (workload.inputs.get(name) is None and spec.optional)
        and not isinstance(workload.inputs.get(name), (ScalarInput, SafetensorsInput))
        for name, spec in definition.inputs.items()
    )


def materialize(
    definition: Definition,
    workload: Workload,
    *,
    data_root: Path,
    device: str | torch.device = "cpu",
    capture: CaptureRecord | None = None,
    verify_hash: bool = True,
) -> Materialized:
    """All inputs of ``workload`` in the definition's order, on ``device``."""
    generated: dict[str, Any] | None = None
    result = Materialized([], [], {})
    for name, spec in definition.inputs.items():
        descriptor = workload.inputs.get(name)
        if descriptor is None and spec.optional:
            value, origin = None, SCALAR
        elif isinstance(descriptor, ScalarInput):
            value, origin = descriptor.value, SCALAR
        elif isinstance(descriptor, SafetensorsInput):
            value, meta = blobs.load_verified(
                definition, workload, name, descriptor, data_root, verify_hash
            )
            result.metadata[name] = meta
            origin = meta.get("origin", CAPTURED)
            if origin == STANDIN:
                result.generator = meta.get("generator", result.generator)
        else:  # random, or absent (flashinfer-bench treats an absent input as random)
            if generated is None:
                result.generator, generated = standins.generate(definition, workload, capture)
            value, origin = generated[name], STANDIN
            if isinstance(value, torch.Tensor):
                verify_tensor(definition, workload, name, value, f"stand-in {result.generator}")
                value = standins.parameter_on(value, torch.device(device))
        if isinstance(value, torch.Tensor):
            value = value.to(device)
        result.names.append(name)
        result.values.append(value)
        result.origins[name] = origin
    return result


def write_standins(
    definition: Definition,
    workload: Workload,
    output_root: Path,
    capture: CaptureRecord | None = None,
) -> Workload:
    """Write this workload's stand-ins into the blob store under ``output_root``.

    Returns the workload with each ``random`` tensor input replaced by a
    ``safetensors`` descriptor; the blob's metadata labels it a stand-in.
    """
    label, generated = standins.generate(definition, workload, capture)
    inputs = dict(workload.inputs)
    for name, spec in definition.inputs.items():
        descriptor = workload.inputs.get(name)
        if spec.shape is None or not (descriptor is None or isinstance(descriptor, RandomInput)):
            continue
        metadata = {
            "origin": STANDIN,
            "generator": label,
            "standin_version": standins.STANDIN_VERSION,
            "definition": definition.name,
            "workload": workload.uuid,
            "input": name,
        }
        inputs[name] = blobs.put(output_root, definition.name, generated[name], metadata)
    return workload.model_copy(update={"inputs": inputs})
