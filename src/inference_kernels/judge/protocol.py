"""Every message a worker may send the referee, as a closed set of strict models.

A worker runs solution code, so what it sends is data to validate, never an instruction:
a message of another kind, with an unknown or missing field, or with a value out of
range is a protocol violation and ends the case as a failure. A worker can report that
something failed (``Failed``, from ``WORKER_FAILURES`` only); it has no way to say that
anything passed. The referee's own messages to the worker are plain dicts built here too.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from .. import statuses
from ..dtypes import TORCH_DTYPES

METHODS = ("eager", "prepared", "graph")
Method = Literal["eager", "prepared", "graph"]

# The failures a worker may report about its own solution's calls.
WORKER_FAILURES = (
    statuses.RUNTIME_ERROR,
    statuses.WRONG_OUTPUT_COUNT,
    statuses.TYPE_MISMATCH,
    statuses.DEVICE_MISMATCH,
    statuses.OUTPUT_ALIASES_INPUT,
    statuses.TIMING_ERROR,
    statuses.TIMED_OUTPUT_MISMATCH,
)

# Why a solution did not load: its sources did not compile, or anything else.
LOAD_FAILURES = (statuses.LOAD_FAILED, statuses.COMPILE_ERROR)

_Count = Annotated[int, Field(ge=0, le=1 << 48)]
_Text = Annotated[str, Field(max_length=4000)]
_KernelName = Annotated[str, Field(max_length=120)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


_Id = Annotated[int, Field(ge=0, lt=1 << 20)]


class MemfdBuffer(_Strict):
    kind: Literal["memfd"]
    id: _Id
    fd: Annotated[int, Field(ge=0, lt=64)]
    size: _Count


class CudaBuffer(_Strict):
    kind: Literal["cuda"]
    id: _Id
    handle: Annotated[str, Field(pattern=r"^[0-9a-f]{128}$")]
    size: _Count


Buffer = Annotated[MemfdBuffer | CudaBuffer, Field(discriminator="kind")]


class TensorRef(_Strict):
    buffer: _Id
    offset: _Count
    dtype: str
    shape: Annotated[list[_Count], Field(max_length=16)]
    stride: Annotated[list[_Count], Field(max_length=16)]

    @field_validator("dtype")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in TORCH_DTYPES:
            raise ValueError(f"unknown dtype {value!r}")
        return value


def _finite(value: float | None) -> float | None:
    if value is not None and (not math.isfinite(value) or value < 0):
        raise ValueError("must be a finite, non-negative number")
    return value


class Loaded(_Strict):
    op: Literal["loaded"]
    ok: bool
    error: _Text | None = None
    status: Literal[LOAD_FAILURES] = statuses.LOAD_FAILED  # type: ignore[valid-type]
    prepare: bool = False


class Failed(_Strict):
    """The solution's calls failed in the worker (never a verdict of success)."""

    op: Literal["failed"]
    status: Literal[WORKER_FAILURES]  # type: ignore[valid-type]
    error: _Text


class Checked(_Strict):
    """The checked call's outputs, for the referee to compare."""

    op: Literal["checked"]
    seconds: float
    outputs: Annotated[list[TensorRef], Field(max_length=64)]
    buffers: Annotated[list[Buffer], Field(max_length=4096)]

    @field_validator("seconds")
    @classmethod
    def _seconds(cls, value: float) -> float:
        return _finite(value)


class Mapped(_Strict):
    """The timing input sets are mapped."""

    op: Literal["mapped"]


_SlotRefs = Annotated[
    list[Annotated[list[TensorRef], Field(max_length=64)]], Field(max_length=1 << 16)
]


class Ready(_Strict):
    """A timing method is set up (prepared launches made, graph captured). A graph on CUDA
    names its calls' outputs here, where they will be after every replay, so that no sample
    carries the cost of exporting them (its samples then all answer "same")."""

    op: Literal["ready"]
    method: Method
    outputs: _SlotRefs | None = None
    buffers: Annotated[list[Buffer], Field(max_length=4096)] = []


class Unavailable(_Strict):
    """A timing method cannot be used (a graph that cannot be captured): no time for it."""

    op: Literal["unavailable"]
    method: Method
    error: _Text


class Sample(_Strict):
    """One timed sample: the worker's own time per call, and each slot's outputs (or
    "same": the references of its previous sample of this method, as a graph's are)."""

    op: Literal["sample"]
    method: Method
    index: Annotated[int, Field(ge=-1, le=1 << 20)]  # -1: the warmup sample
    us: float
    host_us: float | None = None
    outputs: _SlotRefs | Literal["same"]
    buffers: Annotated[list[Buffer], Field(max_length=4096)]

    @field_validator("us", "host_us")
    @classmethod
    def _times(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError("a time must be positive")  # a call takes time; 0 is a lie
        return _finite(value)


class Kernels(_Strict):
    """The device's own durations of one eager sample's kernels (CUPTI), per call, or why
    there are none. Reported, never judged on: the worker could write anything here."""

    op: Literal["kernels"]
    us: float | None = None  # kernels
    copies_us: float | None = None  # memory copies and sets
    launches: float | None = None  # kernels per call
    top: dict[_KernelName, float] | None = Field(default=None, max_length=8)  # us per call
    error: _Text | None = None

    @field_validator("us", "copies_us", "launches")
    @classmethod
    def _values(cls, value: float | None) -> float | None:
        return _finite(value)

    @field_validator("top")
    @classmethod
    def _tops(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for us in (value or {}).values():
            _finite(us)
        return value


class Ended(_Strict):
    op: Literal["ended"]


class Awake(_Strict):
    """The answer to "wake": the worker is back waiting for the referee, what it does after
    a reply (the collection it put off) done."""

    op: Literal["awake"]


Message = Annotated[
    Loaded | Failed | Checked | Mapped | Ready | Unavailable | Sample | Kernels | Ended | Awake,
    Field(discriminator="op"),
]
_MESSAGE = TypeAdapter(Message)


class Violation(ValueError):
    """A worker message outside the protocol; the message is one line."""


def parse(message: dict[str, Any], *expected: type[BaseModel]) -> BaseModel:
    """The message as one of the ``expected`` kinds (``Failed`` is always expected)."""
    try:
        parsed = _MESSAGE.validate_python(message)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise Violation(f"{where}: {first['msg']}"[:300]) from None
    if not isinstance(parsed, (*expected, Failed)):
        wanted = " or ".join(kind.__name__.lower() for kind in expected)
        raise Violation(f"sent {type(parsed).__name__.lower()} where {wanted} was due")
    return parsed
