"""Timing a call: eager (CUDA events), prepared launch, CUDA graph; wall clock on the CPU.

Every sample covers ``iters`` back-to-back calls that rotate over input copies at
distinct addresses, and is divided by ``iters``; the median and spread are over
``trials`` samples, after ``warmup`` calls. The CUDA graph captures ``iters`` calls and
is replayed once per sample. With ``cold_l2`` the eager samples are single calls with
twice the L2 size of memory written in between (outside the timed interval).

Each eager sample is also timed on the host up to a device-wide synchronize: a call
whose work runs where the timing stream does not wait (a side stream) shows a host
time far above its event time, and is reported as suspect.

Timer functions are bound at import, before any solution is imported, so a solution
that patches ``torch.cuda.Event`` or ``time.perf_counter`` does not change them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from .guards import poison

_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed = torch.cuda.Event.elapsed_time
_event_synchronize = torch.cuda.Event.synchronize
_synchronize = torch.cuda.synchronize
_zero = torch.Tensor.zero_

# A sample is suspect when the host, waiting for the whole device, saw this much more.
SUSPECT_RATIO = 1.5
SUSPECT_SLACK_US = 200.0


@dataclass
class Measurement:
    method: str
    median_us: float
    min_us: float
    max_us: float
    stdev_us: float
    calls_per_sample: int
    samples_us: list[float] = field(default_factory=list)
    host_median_us: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def _summary(method: str, samples: list[float], calls: int, host: list[float] | None = None):
    return Measurement(
        method=method,
        median_us=statistics.median(samples),
        min_us=min(samples),
        max_us=max(samples),
        stdev_us=statistics.stdev(samples) if len(samples) > 1 else 0.0,
        calls_per_sample=calls,
        samples_us=[round(s, 4) for s in samples],
        host_median_us=statistics.median(host) if host else None,
    )


def suspect(measurement: Measurement) -> bool:
    """Did the device hold work the timing stream did not wait for?"""
    host = measurement.host_median_us
    if host is None:
        return False
    calls = measurement.calls_per_sample
    return host * calls > SUSPECT_RATIO * measurement.median_us * calls + SUSPECT_SLACK_US


# Slow calls get a shorter schedule than the task's, so that timing one case takes
# seconds, not hours: about this long per sample, and this long in all.
SAMPLE_SECONDS = 0.1
CASE_SECONDS = 3.0
# A worker loads its GPU this long before its first timed case. Under a power cap the
# clock a power-bound kernel gets falls for seconds as the chip warms: on the H200 a
# bf16 GEMM ran at about 1,500 MHz in its first seconds after idle and at 1,470 MHz from
# about 8 s on, so the first case timed on an idle GPU read 2-3% fast
# (docs/measurements/h200-timing-fidelity.md).
PREHEAT_SECONDS = 10.0
# Graph samples start after this much replaying, so that each case's samples see the
# clocks of sustained work: in the pause before a case the power drops and the clock
# jumps for a moment (to about 1,590 MHz for that GEMM).
STEADY_SECONDS = 1.0
# Graph samples are spread over this long, with untimed replays between them: under
# sustained load the clocks of a power-bound kernel swing over tens of milliseconds, and
# samples taken back to back would all land in one swing.
SAMPLE_WINDOW_SECONDS = 1.0


def schedule(options: dict, call_seconds: float, device: torch.device) -> tuple[int, int, int]:
    """(warmup, iters, trials): the task's, shortened for slow calls and on the CPU.

    ``call_seconds`` is the duration of one untimed call. On CUDA, trials never drop
    below 3; on the CPU a call over a second is timed once.
    """
    warmup, iters, trials = options["warmup"], options["iters"], options["trials"]
    if device.type != "cuda":  # CPU timings are indicative only: keep CPU runs short
        return (1, 1, 1) if call_seconds > 1.0 else (1, 1, min(trials, 3))
    if call_seconds <= 0:
        return warmup, iters, trials
    iters = max(1, min(iters, int(SAMPLE_SECONDS / call_seconds)))
    trials = max(3, min(trials, int(CASE_SECONDS / (call_seconds * iters))))
    warmup = max(1, min(warmup, int(SAMPLE_SECONDS / call_seconds)))
    return warmup, iters, trials


Call = Callable[[int], Any]  # call(i) runs call number i and returns its outputs


def eager(
    call: Call, warmup: int, iters: int, trials: int, device: torch.device, keep: set[int]
) -> tuple[Measurement, dict[int, Any]]:
    """Time ``trials`` samples of ``iters`` calls after ``warmup`` calls (numbered on from
    0); returns the measurement and the outputs of the calls numbered in ``keep``."""
    kept: dict[int, Any] = {}

    def one(i: int) -> None:
        result = call(i)
        if i in keep:
            kept[i] = result

    for i in range(warmup):
        one(i)
    if device.type != "cuda":
        return _cpu_wall(one, warmup, iters, trials), kept
    _synchronize(device)
    samples, host = [], []
    for trial in range(trials):
        first = warmup + trial * iters
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        began = _perf_counter()
        _record(start)
        for i in range(first, first + iters):
            one(i)
        _record(end)
        _synchronize(device)
        host.append((_perf_counter() - began) * 1e6 / iters)
        samples.append(_elapsed(start, end) * 1000 / iters)
    return _summary("cuda-events", samples, iters, host), kept


def _cpu_wall(one: Callable[[int], None], warmup: int, iters: int, trials: int) -> Measurement:
    samples = []
    for trial in range(trials):
        first = warmup + trial * iters
        began = _perf_counter()
        for i in range(first, first + iters):
            one(i)
        samples.append((_perf_counter() - began) * 1e6 / iters)
    return _summary("cpu-wall-clock", samples, iters)


def eager_cold(
    call: Call, warmup: int, trials: int, device: torch.device, keep: set[int]
) -> tuple[Measurement, dict[int, Any]]:
    """Single calls, each after writing twice the L2 size, so that the cache starts cold."""
    size = torch.cuda.get_device_properties(device).L2_cache_size
    flush = torch.empty(2 * size, dtype=torch.uint8, device=device)
    kept: dict[int, Any] = {}
    for i in range(warmup):
        result = call(i)
        if i in keep:
            kept[i] = result
    samples = []
    for i in range(warmup, warmup + trials):
        _zero(flush)
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        _record(start)
        result = call(i)
        _record(end)
        _event_synchronize(end)
        samples.append(_elapsed(start, end) * 1000)
        if i in keep:
            kept[i] = result
    _synchronize(device)
    return _summary("cuda-events, cold L2", samples, 1), kept


def preheat(device: torch.device, seconds: float = PREHEAT_SECONDS) -> float:
    """Run bf16 matrix products on ``device`` for about ``seconds``; returns the seconds
    spent (0 off CUDA)."""
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


def _steady(replay: Callable[[], None], device: torch.device) -> float:
    """Replay for about STEADY_SECONDS, so samples see the clocks of sustained work;
    returns the seconds one replay took."""
    start, end = _Event(enable_timing=True), _Event(enable_timing=True)
    _record(start)
    replay()
    _record(end)
    _event_synchronize(end)
    once = max(_elapsed(start, end) / 1000, 1e-6)
    for _ in range(min(int(STEADY_SECONDS / once), 10_000)):
        replay()
    _synchronize(device)
    return once


def graph(call: Call, warmup: int, iters: int, trials: int, device: torch.device):
    """Capture calls 0..iters-1 in one CUDA graph and time its replays.

    The captured calls' outputs are poisoned (NaN / all-ones) before the first replay,
    so work that escaped the capture leaves them poisoned. Samples follow about
    STEADY_SECONDS of untimed replays. Returns (Measurement, the
    outputs of every captured call, as the last replay left them). Capture errors
    propagate to the caller.
    """
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for i in range(max(1, warmup)):
            call(i % iters)
    torch.cuda.current_stream(device).wait_stream(side)
    _synchronize(device)
    cuda_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(cuda_graph):
        outputs = [call(i) for i in range(iters)]
    for produced in outputs:
        poison(produced)
    _synchronize(device)
    once = _steady(cuda_graph.replay, device)
    between = min(int(SAMPLE_WINDOW_SECONDS / trials / once), 10_000)
    samples = []
    for _ in range(trials):
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        _record(start)
        cuda_graph.replay()
        _record(end)
        for _ in range(between):
            cuda_graph.replay()
        _event_synchronize(end)
        samples.append(_elapsed(start, end) * 1000 / iters)
    _synchronize(device)
    return _summary("cuda-graph", samples, iters), outputs
