"""The schedule of a case's timing: calls per sample, samples per phase, when to stop.

``plan`` sizes the samples from the time of one call (the calibration); ``Phase`` holds a
method's samples while the rounds run and decides when it has enough (adaptive
repetition); ``summary`` is a phase's entry in the row.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import torch

from ..stats import median_interval
from .clocks import Log
from .outside import ALLOWANCE, TOLERANCE

# Slow calls get a short schedule: about this long per sample, and this long per method.
SAMPLE_SECONDS = 0.1
CASE_SECONDS = 3.0
MAX_CALLS = 4000  # calls per sample
# Adaptive repetition: every phase gets at least MIN_ROUNDS samples (six are the fewest
# whose order statistics bound the median at 95%, stats.py), then stops when that interval
# is within TARGET_HALF_WIDTH of the median, or when the case has spent the time of the
# schedule's trials (median full round x trials); what one phase leaves, the noisier ones
# may use, up to ROUNDS_PER_TRIAL x trials samples (a solution controls its own times, so
# it must not be able to stretch a phase at will).
MIN_ROUNDS = 6
TARGET_HALF_WIDTH = 0.01
ROUNDS_PER_TRIAL = 3
# A sample lasts at least this long when the calls are fast, so that the fixed allowance
# is a small part of it.
SAMPLE_MIN_SECONDS = {"cuda": 2 * ALLOWANCE["cuda"] / TOLERANCE["cuda"], "cpu": 0.064}


@dataclass
class Phase:
    """One method's samples while the rounds run."""

    method: str
    iters: int  # calls per sample
    launch: str | None = None  # a graph's: "prepared" when it replays prepared launches
    resampled: bool = False
    samples: list[float] = field(default_factory=list)  # the worker's times, us per call
    host: list[float] = field(default_factory=list)
    outside: list[float] = field(default_factory=list)  # the referee's, seconds per sample
    clocks: Log = field(default_factory=Log)
    stopped: str | None = None  # "converged", "time_cap" or "max_rounds"
    dropped: list[int] = field(default_factory=list)  # rounds whose sample did not count
    slowest: list[int] = field(default_factory=list)  # samples ranked as the slowest
    late: list[int] = field(default_factory=list)  # ... of them, those over the outside limit

    def ranked(self) -> list[float]:
        """The samples the phase's figures come from: those in ``slowest`` count as the
        slowest of all (the GPU was busy after them, or the referee saw far more than they
        report: what they report cannot be vouched for, and can only move the median up, by
        a rank each)."""
        if not self.slowest:
            return self.samples
        top = max(self.samples)
        return [top if i in self.slowest else t for i, t in enumerate(self.samples)]

    def half_width(self) -> float:
        """The larger side of the median's 95% interval, relative to the median."""
        samples = self.ranked()
        low, high, _ = median_interval(samples)
        middle = statistics.median(samples)
        return max(middle - low, high - middle) / middle if middle > 0 else math.inf


@dataclass
class Plan:
    warmup: int
    iters: int
    trials: int


def plan(
    task: dict[str, int],
    per_call: float,
    device: torch.device,
    sets: int,
    cold_l2: bool,
    regime: str = "sustained",
) -> Plan:
    """The schedule of every method of a case, from the task's and the time of one call
    (the worker's own report of its warmup: a false one only shortens or lengthens its
    samples, and the outside check bounds what that can hide). In the burst regime a
    sample is as short as the outside check allows."""
    per_call = max(per_call, 1e-7)
    kind = device.type if device.type == "cuda" else "cpu"
    warmup = max(1, min(task["warmup"], int(SAMPLE_SECONDS / per_call)))
    shortest = math.ceil(SAMPLE_MIN_SECONDS[kind] / per_call)
    if cold_l2:
        iters = 1
    elif regime == "burst":
        iters = shortest
    elif per_call * task["iters"] > SAMPLE_SECONDS:
        iters = max(1, int(SAMPLE_SECONDS / per_call))
    else:
        iters = max(task["iters"], shortest)
    iters = max(1, min(iters, sets, MAX_CALLS))
    trials = max(3, min(task["trials"], int(CASE_SECONDS / (per_call * iters))))
    if kind == "cpu":  # CPU timings are indicative only: keep CPU runs short
        warmup, trials = 1, 1 if per_call > 1.0 else min(trials, 3)
    return Plan(warmup, iters, trials)


def summary(method: str, name: str, samples: list[float], iters: int, host: list[float]) -> dict:
    low, high, coverage = median_interval(samples)
    result = {
        "method": name,
        # rounded as the samples are, so that the row's figures agree with its samples (a
        # median that is the slowest sample was above the rounded maximum, CI at 2147919)
        "median_us": round(statistics.median(samples), 4),
        "median_interval_us": [round(low, 4), round(high, 4)],  # order statistics (stats.py)
        "median_interval_coverage": round(coverage, 4),
        "min_us": round(min(samples), 4),
        "max_us": round(max(samples), 4),
        "stdev_us": statistics.stdev(samples) if len(samples) > 1 else 0.0,
        "calls_per_sample": iters,
        "samples_us": [round(s, 4) for s in samples],
    }
    if host:
        result["host_median_us"] = statistics.median(host)
    return result
