"""The outside check: the worker's own times against the referee's, who times every
sample from outside the sandbox (from the ``go`` it sent to the moment the whole report
had arrived). A worker's clock runs in the solution's process; this bounds how much faster
it can report than what was seen, and a worker that reports more than was seen is caught
too (its report is no time it spent).

When most samples took more than ``(1 + TOLERANCE)`` times what the worker reports, plus
ALLOWANCE (the message round trip), PER_OUTPUT per output (its bookkeeping) and
PER_GRAPH_CALL per call of a graph (its launch), the case
is ``timing_suspect``; the row carries both times and the per-call time the check cannot
resolve (``resolution_us``). ``scripts/outside_margins.py`` shows how close honest runs
come to the limit.
"""

from __future__ import annotations

import statistics
from typing import Any

# The outside check, set from honest baselines (docs/measurements/h200-sandbox.md; on the
# CPU, where timings are indicative only and a busy machine shakes them, only a worker that
# reports less than half of what the referee saw is suspect): the
# worker's time may fall short of the referee's by TOLERANCE plus ALLOWANCE per sample
# (the round trip of two messages and two device synchronizations) plus, for eager and
# prepared samples, PER_OUTPUT per output tensor (its bookkeeping; a graph's outputs are
# the same every sample and cost nothing), plus on the CPU the copy of the outputs.
TOLERANCE = {"cuda": 0.15, "cpu": 1.0}
ALLOWANCE = {"cuda": 0.002, "cpu": 0.008}
# PER_OUTPUT on CUDA was 6 µs until the dev suite on the H200 (f2a082d) showed honest eager
# baselines spending 14 µs per output beyond their timed calls (small SDPA, 500+ calls a
# sample); it was raised to 16 µs. With the cheaper export (segments looked up once, no
# collection during a sample) the same suite at 821de04 spent at most 10.3 µs per output
# (median 5.1) beyond ALLOWANCE; 12 µs keeps that under 88% of the allowed excess.
PER_OUTPUT = {"cuda": 12e-6, "cpu": 20e-6}
# A graph sample's host side grows with its captured calls (the launch of a graph of
# thousands of kernel nodes). Honest 4,000-call graphs of 3-4 us kernels on the H200 spent
# up to 1.0 ms (cuBLAS, dev suite at 0d7e5f7) and 2.1 ms (a Triton GEMM, README
# walkthrough at e53882c: 1 of 14 cases suspect) beyond TOLERANCE, against ALLOWANCE's
# 2 ms; PER_GRAPH_CALL gives 2 ms more to such a sample (0.5 us per call, 12% of a 4 us
# call) and nothing that matters to a long one.
PER_GRAPH_CALL = {"cuda": 0.5e-6, "cpu": 0.0}
COPY_SECONDS_PER_BYTE = {"cuda": 0.0, "cpu": 1 / 5e9}
# The referee's time of a sample brackets the worker's (from the go it sent to the whole
# report's arrival, on the same monotonic clock): a worker that reports more than the
# referee saw, by more than IMPOSSIBLE_RATIO and IMPOSSIBLE_SLACK, reports a time it did not
# spend (the early-header attack made the referee's time nil while the calls ran).
IMPOSSIBLE_RATIO, IMPOSSIBLE_SLACK = 0.02, 100e-6
# One sample over the limit is late (sampling.py) only where the referee also saw more than
# this beyond the worker's time: on a GPU shorter excesses are the referee's own spikes
# (2-6 ms in 0.5-5% of honest samples, H200 audit at b6e1d3b).
LATE_FLOOR = {"cuda": 0.005, "cpu": 0.0}  # seconds
# A sample is suspect when the host, waiting for the whole device, saw this much more
# than the events (work on a stream the events do not cover).
HOST_RATIO, HOST_SLACK_US = 1.5, 200.0
# A method's time counts (reports rank on it, ``report/rows.py``) only where the check
# resolves it: its ``resolution_us`` at most RESOLVED_WITHIN times its median. A counted
# time is then at least 1 / (1 + TOLERANCE + RESOLVED_WITHIN) of what the calls took (on
# a GPU 1/2.15, on the CPU 1/3); beyond it a worker could report any time the allowance
# covers. Where the sets that fit cap a sample's calls, ``_longer`` cannot lengthen it: a
# QSA sparse decode of 418-510 MB sets got 2 calls a sample on the CPU (resolution 4,022 us
# a call) and a solution reporting what the allowance let through passed at 1,436 us where
# the referee saw 5,800-6,100 and the honest baseline took 8,547; on an H100 the honest
# Triton kernel's 12-17 calls of 8.7 us had a resolution of 118-167 (ninth attacker's trial,
# docs/measurements/h200-sandbox.md).
RESOLVED_WITHIN = 1.0


def check(
    method: str,
    samples: list[float],
    seen: list[float],
    iters: int,
    kind: str,
    per_call: float,
) -> tuple[dict[str, Any], str | None]:
    """Compare the worker's times (us per call) with the referee's (seconds per sample),
    sample by sample: (what was seen, for the row; the reason the method is suspect, or
    None). Suspect when most samples took longer outside than the worker's time explains
    (a worker cannot fake the median without faking most samples, and a single hiccup of
    the machine does not make an honest one suspect). ``per_call``: seconds of bookkeeping
    allowed per call beyond ALLOWANCE (``allowed_per_call``)."""
    allowance = ALLOWANCE[kind] + per_call * iters
    tolerance = TOLERANCE[kind]
    excess = [
        over(outside, us, iters, kind, per_call) for outside, us in zip(seen, samples, strict=True)
    ]
    shortfall = [
        (1 - IMPOSSIBLE_RATIO) * us * 1e-6 * iters - IMPOSSIBLE_SLACK - outside
        for outside, us in zip(seen, samples, strict=True)
    ]
    median = statistics.median(seen)
    suspect = None
    if statistics.median(excess) > 0:
        suspect = (
            f"{method}: the worker reported {statistics.median(samples):.1f} us per call, "
            f"the judge saw {median / iters * 1e6:.1f} us per call from outside"
        )
    elif max(shortfall) > 0:
        suspect = (
            f"{method}: the worker reported {statistics.median(samples):.1f} us per call, more "
            f"than the judge saw from outside in a sample ({min(seen) / iters * 1e6:.1f} us "
            "per call): no honest report can"
        )
    entry = {
        "median_us": median / iters * 1e6,
        "samples_us": [round(s / iters * 1e6, 4) for s in seen],
        "resolution_us": allowance / iters * 1e6,
        "tolerance": tolerance,
    }
    return entry, suspect


def over(seen: float, us: float, iters: int, kind: str, per_call: float) -> float:
    """Seconds by which the referee's time of one sample (``seen``) exceeds what the
    worker's ``us`` per call explains (over the limit where positive)."""
    return seen - (1 + TOLERANCE[kind]) * us * 1e-6 * iters - ALLOWANCE[kind] - per_call * iters


def late(seen: float, us: float, iters: int, kind: str, per_call: float) -> bool:
    """Whether one sample took the referee far longer than the worker's time explains:
    over the limit (``over``) and by more than LATE_FLOOR beyond the worker's time."""
    beyond = seen - us * 1e-6 * iters
    return over(seen, us, iters, kind, per_call) > 0 and beyond > LATE_FLOOR[kind]


def allowed_per_call(method: str, kind: str, outputs: int, output_bytes: int) -> float:
    """Seconds per call the worker may spend outside its clock: the copy of its outputs
    (CPU) and, for eager and prepared calls, their bookkeeping (a graph's outputs are the
    same every sample and cost nothing); for a graph, its launch (PER_GRAPH_CALL)."""
    per_call = output_bytes * COPY_SECONDS_PER_BYTE[kind]
    if method != "graph":
        per_call += PER_OUTPUT[kind] * outputs
    else:
        per_call += PER_GRAPH_CALL[kind]
    return per_call


def host_check(method: str, median_us: float, host_us: float | None, iters: int) -> str | None:
    """The worker's own host clock against its events: work on another stream."""
    if host_us is not None and host_us * iters > HOST_RATIO * median_us * iters + HOST_SLACK_US:
        return (
            f"{method}: the host waited far longer than the timed stream (work outside the timer)"
        )
    return None


def resolved(median_us: float, resolution_us: float) -> bool:
    """Whether the check resolves a method's time (RESOLVED_WITHIN): only then does it
    count."""
    return resolution_us <= RESOLVED_WITHIN * median_us
