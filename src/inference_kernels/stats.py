"""Statistics of timing samples, kept apart from measuring them.

- ``median_interval``: a distribution-free interval for the median of a phase's samples,
  from order statistics (the k-th smallest and k-th largest sample, k as large as the
  confidence allows; with few samples the widest one, and its true coverage, which is
  below 95% for fewer than 6 samples).
- ``paired_speedup``: the geometric mean over workloads of old median / new median, with
  a percentile bootstrap interval (samples of every case resampled, seeded: the same rows
  give the same interval). It reflects the noise within the runs only.
- ``verdict``: "faster" or "slower" when the whole interval lies beyond the run-to-run
  floor (RUN_TO_RUN: how far two runs of the same code drift apart, which no interval
  from within one run can see), else "no significant difference".
"""

from __future__ import annotations

import math
import random
import statistics

CONFIDENCE = 0.95
BOOTSTRAP_REPS = 1000
NO_DIFFERENCE = "no significant difference"
REGIMES_DIFFER = "not comparable: timed in different regimes"
# One kernel judged on two H200s of different sessions took 162, 192 and 200 us (SDPA
# B1 h32 N2560, December 1): no floor covers that, so times of different GPUs are not paired.
GPUS_DIFFER = "not comparable: timed on different GPUs"
# How far apart two runs of the same code may come out, as a fraction of the time. CPU:
# no bound holds. Two runs of six definitions' dev workloads on this 2-core machine gave
# 0.78x to 1.54x for identical code on a quiet machine, and identical code judged while
# another job ran came out 41.5x (2.48-84.4) faster than the baseline
# (docs/measurements/h200-regimes.md): CPU wall-clock differences are never significant.
# CUDA: 2%, measured on H200s: the graph median over 5 separate runs moved by at most
# 0.8% (fourth session) and 1.6% (ninth, the burst GEMM on another GPU), and two runs of the
# same 20 dev workloads gave per-workload ratios of 0.984-1.021 whose intervals excluded 1.0
# by at most 1.2% (h200-regimes.md, "Fourth session"; ninth: 0.980-1.014, none). Two GPUs
# of one host differ by more (3% on one GEMM): compare runs of the same GPU.
RUN_TO_RUN = {"cpu": math.inf, "cuda": 0.02}


def _coverage(n: int, k: int) -> float:
    """P(x_(k) <= median <= x_(n+1-k)) for n samples of a continuous distribution."""
    tail = sum(math.comb(n, i) for i in range(k)) / 2**n
    return 1 - 2 * tail


def median_interval(samples: list[float], confidence: float = CONFIDENCE):
    """(low, high, coverage) for the median of ``samples``; None without samples."""
    if not samples:
        return None
    ordered = sorted(samples)
    n, k = len(ordered), 1
    while k + 1 <= (n + 1) // 2 and _coverage(n, k + 1) >= confidence:
        k += 1
    return ordered[k - 1], ordered[n - k], _coverage(n, k)


def paired_speedup(
    pairs: list[tuple[list[float], list[float]]],
    reps: int = BOOTSTRAP_REPS,
    confidence: float = CONFIDENCE,
) -> tuple[float, float, float] | None:
    """(speedup, low, high): geometric mean over ``pairs`` of (old samples, new samples) of
    median(old) / median(new), and its bootstrap interval; None without usable pairs."""
    pairs = [(old, new) for old, new in pairs if old and new and min(old) > 0 and min(new) > 0]
    if not pairs:
        return None

    def speedup(draw) -> float:
        logs = [
            math.log(statistics.median(draw(old))) - math.log(statistics.median(draw(new)))
            for old, new in pairs
        ]
        return math.exp(sum(logs) / len(logs))

    generator = random.Random(0)
    point = speedup(lambda values: values)
    spread = sorted(
        speedup(lambda values: generator.choices(values, k=len(values))) for _ in range(reps)
    )
    tail = (1 - confidence) / 2
    low = spread[int(tail * reps)]
    high = spread[min(reps - 1, math.ceil((1 - tail) * reps) - 1)]
    return point, low, high


def verdict(low: float, high: float, floor: float = 0.0) -> str:
    """The speedup interval (low, high) read against 1.0 widened by the run-to-run
    ``floor`` on each side."""
    if low > 1.0 + floor:
        return "faster"
    if high < 1.0 / (1.0 + floor):
        return "slower"
    return NO_DIFFERENCE
