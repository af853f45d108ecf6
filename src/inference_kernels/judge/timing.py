"""Clocks: a worker's timed samples (CUDA events, CUDA graph replays, CPU wall clock), and
the load the referee puts on a GPU before timing.

A sample is ``calls`` back-to-back calls, each on its own input set, timed as one
interval and divided by ``calls``. On CUDA the interval is measured with events and the
host also waits for the whole device, so work left on another stream shows as a host time
far above the event time. A worker's clock is its own report: solution code can rewrite
this module in its process, which is why the referee also times every sample from
outside the sandbox (``sampling.py``).

Timer functions are bound at import, before any solution is imported, so that a solution
that only patches ``torch.cuda.Event`` or ``time.perf_counter`` does not change them.

For tests only, ``INFERENCE_KERNELS_FAKE_GRAPH=1`` gives the CPU a stand-in for CUDA graphs
(``CpuGraph``), so that the referee's graph path (sizing, static outputs, checks, the
outside check) runs in CI. Its times are labelled as the stand-in's in every row.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from inference_kernels.judge import call_order

_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed = torch.cuda.Event.elapsed_time
_synchronize = torch.cuda.synchronize
_zero = torch.Tensor.zero_
_profile = torch.profiler.profile
_CUDA_ACTIVITY = torch.profiler.ProfilerActivity.CUDA
_CUDA_DEVICE = torch.autograd.DeviceType.CUDA
FAKE_GRAPH = os.environ.get("INFERENCE_KERNELS_FAKE_GRAPH") == "1"
if FAKE_GRAPH and not torch.cuda.is_available():  # the stand-in's world: not capturing yet
    torch.cuda.is_current_stream_capturing = lambda: False

Slot = Callable[[], Any]  # one call on one input set; returns its outputs


def sample(slots: list[Slot], device: torch.device) -> tuple[float, float | None, list[Any]]:
    """Run every slot once, back to back: (microseconds per call by the clock of the
    device, host microseconds per call up to a device-wide synchronize (CUDA only), the
    outputs of each slot)."""
    calls = len(slots)
    if device.type != "cuda":
        began = _perf_counter()
        outputs = [slot() for slot in slots]
        return (_perf_counter() - began) * 1e6 / calls, None, outputs
    _synchronize(device)
    start, end = _Event(enable_timing=True), _Event(enable_timing=True)
    began = _perf_counter()
    _record(start)
    outputs = [slot() for slot in slots]
    _record(end)
    _synchronize(device)
    host = (_perf_counter() - began) * 1e6 / calls
    return _elapsed(start, end) * 1000 / calls, host, outputs


def kernel_sample(slots: list[Slot], device: torch.device, idle_s: float = 0.0) -> DeviceTimes:
    """Run every slot once, eagerly, under CUPTI activity tracing (torch's profiler):
    its device times (``device_times``).
    With ``idle_s`` each call starts alone, after the device has finished the previous one
    and rested that long; without, the calls follow each other in the stream.

    A kernel's duration is from its start to its end on the device, what Nsight Compute
    reports as ``gpu__time_duration``: it leaves out the gap between one kernel's end and
    the next one's start, which a timed sequence of calls includes (about 1 us on the H200,
    docs/measurements/h200-regimes.md)."""
    if device.type != "cuda":
        raise RuntimeError("kernel durations come from CUPTI, on a CUDA device only")
    _synchronize(device)
    with _profile(activities=[_CUDA_ACTIVITY]) as profiled:
        for slot in slots:
            if idle_s:
                _synchronize(device)
                time.sleep(idle_s)
            slot()
        _synchronize(device)
    return device_times(profiled.profiler.kineto_results.events(), len(slots))


class DeviceTimes(NamedTuple):
    us: float  # kernels, per call
    copies_us: float  # memory copies and sets, per call
    launches: float  # kernels per call
    top: dict[str, float]  # the heaviest kernels by name (TOP_KERNELS), us per call


TOP_KERNELS = 4
KERNEL_NAME_CHARS = 120


def device_times(events: Any, calls: int) -> DeviceTimes:
    """From profiler events: kernel, copy and set us per call, kernels per call, and the
    heaviest kernels by name (which kernel a library chose: cuDNN's or flash attention's,
    one cuBLAS tile or another). Events of other kinds (host calls, synchronization) are
    not device work."""
    kernels = copies = 0.0
    count = 0
    by_name: dict[str, float] = {}
    for event in events:
        kind = _kind(event)
        if kind == "kernel":
            kernels += event.duration_ns()
            count += 1
            name = event.name()[:KERNEL_NAME_CHARS]
            by_name[name] = by_name.get(name, 0.0) + event.duration_ns()
        elif kind in ("gpu_memcpy", "gpu_memset"):
            copies += event.duration_ns()
    if count == 0:
        raise RuntimeError("the profiler saw no kernel")
    heaviest = sorted(by_name.items(), key=lambda item: -item[1])[:TOP_KERNELS]
    top = {name: ns / 1e3 / calls for name, ns in heaviest}
    return DeviceTimes(kernels / 1e3 / calls, copies / 1e3 / calls, count / calls, top)


def _kind(event: Any) -> str:
    """An event's activity: "kernel", "gpu_memcpy", "gpu_memset", or another kind. Before
    torch 2.12 events do not say: device events are then told apart by name, as CUPTI names
    copies and sets ("Memcpy HtoD (Device -> Device)", "Memset (Device)") and torch its
    synchronization events. (A solution can only add to its own kernel time this way, by
    naming ranges of its own: never take from it.)"""
    if hasattr(event, "activity_type"):
        return event.activity_type()
    if event.device_type() != _CUDA_DEVICE:
        return "host"
    name = event.name()
    if name.startswith("Memcpy"):
        return "gpu_memcpy"
    if name.startswith("Memset"):
        return "gpu_memset"
    if name in _SYNCHRONIZATIONS:
        return "cuda_sync"
    return "kernel"


_SYNCHRONIZATIONS = frozenset(("Event Sync", "Stream Sync", "Context Sync", "Stream Wait Event"))


def capture(slots: list[Slot], warmup: int, device: torch.device) -> tuple[Any, list[Any]]:
    """Warm up on a side stream, capture one call per slot in one CUDA graph, and replay it
    once, untimed; returns the graph and each captured call's outputs. Capture errors
    propagate. The first replay of a new graph is slow (its first launch uploads it): in
    the H200 audit at ae23d6d the first sample of a graph captured for its phase was the
    slowest of its samples in 376 of 556 phases and over 10% above the others' median in
    180; that of a graph replayed once before (to size it) in 43 of 144, and over 10% above
    in 1. The sizing replay was such a first replay too (``Sampler._size``)."""
    if device.type != "cuda":
        graph = CpuGraph(slots)
        for i in range(max(1, warmup)):
            slots[i % len(slots)]()
        return graph, graph.capture()
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for i in range(max(1, warmup)):
            slots[i % len(slots)]()
        _synchronize(device)
        # Not ``torch.cuda.graph``: it empties the allocator's cache first, so that the
        # worker's next eager calls ask the driver for memory again (a candidate for the
        # 60 ms of a case's setup outside the capture, benchmarks/capture_cost.py).
        # Kept until its calls are put in order (call_order.py), then instantiated.
        graph = _kept_graph()
        calls = call_order.Calls(call_order.CudaGraphs(), side.cuda_stream)
        graph.capture_begin()
        try:
            outputs = []
            for slot in slots:
                outputs.append(slot())
                calls.mark()
        finally:
            graph.capture_end()
    calls.serialize(graph.raw_cuda_graph())
    graph.instantiate()
    torch.cuda.current_stream(device).wait_stream(side)
    _synchronize(device)
    graph.replay()
    _synchronize(device)
    return graph, outputs


def _kept_graph() -> Any:
    """A CUDA graph whose captured form stays editable until it is instantiated."""
    try:
        return torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:  # (torch before keep_graph)
        raise call_order.GraphOrderError(
            "this torch cannot keep a captured graph to put its calls in order "
            "(torch.cuda.CUDAGraph(keep_graph=True))"
        ) from None


class Graphs:
    """A method's captured calls, in one or more graphs replayed in order, one after
    another. A graph sized after its first capture grows by a graph of its new calls only
    (``Worker.method``'s ``extend``): the calls it had are not captured a second time."""

    def __init__(self) -> None:
        self.parts: list[Any] = []
        self.outputs: list[Any] = []  # each captured call's outputs, in call order

    @property
    def calls(self) -> int:
        return len(self.outputs)

    def add(self, graph: Any, outputs: list[Any]) -> None:
        self.parts.append(graph)
        self.outputs += outputs

    def replay(self) -> None:
        for part in self.parts:
            part.replay()


def replay(graph: Any, calls: int, device: torch.device) -> tuple[float, float]:
    """One timed replay of ``graph`` (``calls`` captured calls): (microseconds per call,
    host microseconds per call up to a device-wide synchronize)."""
    if device.type != "cuda":
        began = _perf_counter()
        graph.replay()
        us = (_perf_counter() - began) * 1e6 / calls
        return us, us
    _synchronize(device)
    start, end = _Event(enable_timing=True), _Event(enable_timing=True)
    began = _perf_counter()
    _record(start)
    graph.replay()
    _record(end)
    _synchronize(device)
    host = (_perf_counter() - began) * 1e6 / calls
    return _elapsed(start, end) * 1000 / calls, host


@contextlib.contextmanager
def _capturing():
    """What a solution sees while a graph is captured: a capturing stream."""
    saved = torch.cuda.is_current_stream_capturing
    torch.cuda.is_current_stream_capturing = lambda: True
    try:
        yield
    finally:
        torch.cuda.is_current_stream_capturing = saved


class CpuGraph:
    """Tests only: a CPU stand-in for a CUDA graph. A graph replays the work its capture
    recorded into the same output tensors; here every replay runs the captured calls again,
    as a capturing stream (so a solution that does something else under capture does so
    every replay), and copies what they return into the outputs of the capture."""

    def __init__(self, slots: list[Slot]):
        if not FAKE_GRAPH:
            raise RuntimeError("CUDA graphs need a CUDA device")
        self.slots = slots
        self.outputs: list[Any] = []

    def capture(self) -> list[Any]:
        with _capturing():
            self.outputs = [slot() for slot in self.slots]
        return self.outputs

    def replay(self) -> None:
        with _capturing():
            produced = [slot() for slot in self.slots]
        for kept, made in zip(self.outputs, produced, strict=True):
            for static, value in zip(kept, made, strict=True):
                if static is not value:
                    static.copy_(value)


def load(device: torch.device, seconds: float) -> float:
    """Run bf16 matrix products on ``device`` for about ``seconds`` (the referee's preheat
    and steady load); returns the seconds spent (0 off CUDA)."""
    if device.type != "cuda" or seconds <= 0:
        return 0.0
    a = torch.randn(8192, 8192, device=device).bfloat16()
    began = _perf_counter()
    while _perf_counter() - began < seconds:
        for _ in range(10):
            torch.mm(a, a)
        _synchronize(device)
    del a
    return _perf_counter() - began


def flush_l2(device: torch.device, scratch: dict[str, torch.Tensor]) -> None:
    """Write twice the L2 size, so that the next sample starts with a cold cache."""
    if "flush" not in scratch:
        size = torch.cuda.get_device_properties(device).L2_cache_size
        scratch["flush"] = torch.empty(2 * size, dtype=torch.uint8, device=device)
    _zero(scratch["flush"])
    _synchronize(device)
