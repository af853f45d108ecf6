"""What a stand-in generator sees: the definition, the workload, its dims and streams."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...schema import CaptureRecord, Definition, Workload
from .streams import Streams


@dataclass
class StandinContext:
    definition: Definition
    workload: Workload
    capture: CaptureRecord | None = None

    def __post_init__(self) -> None:
        self.dims: dict[str, int] = {**self.definition.const_axes(), **self.workload.axes}
        self.streams = Streams(self.workload.uuid)

    def shape(self, name: str) -> list[int]:
        spec = self.definition.inputs[name]
        return [self.dims[axis] for axis in spec.shape or []]

    def capture_field(self, key: str) -> Any:
        return None if self.capture is None else (self.capture.model_extra or {}).get(key)
