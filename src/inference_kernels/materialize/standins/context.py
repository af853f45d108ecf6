"""What a stand-in generator sees: the definition, the workload, its dims and streams."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ...schema import CaptureRecord, Definition, Workload
from .streams import Streams

# The current definition's model parameters (one definition at a time: memory is bounded).
_PARAMETERS: dict[Any, Any] = {}


def parameter_on(value: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``value`` on ``device``: for a kept model parameter (or a view of all of it) one copy
    per device, kept with it, so the next workload of the definition does not copy it
    again; any other tensor is copied as ``to`` copies it."""
    for key, kept in list(_PARAMETERS.items()):
        if (
            isinstance(kept, torch.Tensor)
            and kept.device.type == "cpu"
            and value.data_ptr() == kept.data_ptr()
            and value.nbytes == kept.nbytes
        ):
            where = (key, str(device), value.dtype, tuple(value.shape))
            if where not in _PARAMETERS:
                _PARAMETERS[where] = value.to(device)
            return _PARAMETERS[where]
    return value.to(device)


@dataclass
class StandinContext:
    definition: Definition
    workload: Workload
    capture: CaptureRecord | None = None

    def __post_init__(self) -> None:
        self.dims: dict[str, int] = {**self.definition.const_axes(), **self.workload.axes}
        self.streams = Streams(self.workload.uuid, self.definition.name)

    def parameter(self, name: str, make: Callable[[], torch.Tensor]) -> torch.Tensor:
        """A model parameter of this definition (drawn from ``streams.model``): made once
        per process and kept while the process materializes this definition (a few GB for
        the grouped GEMMs' experts, generated in seconds). The same tensor is returned
        every time: callers never write into it."""
        owner = hashlib.sha256(self.definition.model_dump_json().encode()).hexdigest()
        key = (owner, name)  # by content: a same-named definition of other sizes is another
        if _PARAMETERS.get("definition") != owner:
            _PARAMETERS.clear()
            _PARAMETERS["definition"] = owner
        if key not in _PARAMETERS:
            _PARAMETERS[key] = make()
        return _PARAMETERS[key]

    def shape(self, name: str) -> list[int]:
        spec = self.definition.inputs[name]
        return [self.dims[axis] for axis in spec.shape or []]

    def capture_field(self, key: str) -> Any:
        return None if self.capture is None else (self.capture.model_extra or {}).get(key)
