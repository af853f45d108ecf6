"""Does the time of a power-bound kernel depend on the idle gap between the judge's samples?

The sustained regime loads the device before a case's rounds, then takes seven samples of
about 27 ms; between two samples the referee refreshes and compares the input sets, probes
and reads the clocks, and the device idles meanwhile. That gap was 17-18 ms a round at
c839524 and 12.6-13 ms at 7829dc8 (the window kernels), longer before, and the fidelity
benchmark's GEMM ran 8% slower at 7829dc8 than before issue 13 on one GPU, with a spread of
4-5% between copies (docs/measurements/h200-timing-fidelity.md). If the gap decides the
clock, it must be the judge's design, not a side effect of how fast its bookkeeping runs.

This benchmark takes the judge out: per trial, the referee's background load between cases
(1.5 s), its steady load (0.3 s), then seven timed replays of a CUDA graph of about 27 ms
(a bf16 GEMM M4096 N12288 K4096, 50 calls; an SDPA B1 h32 N2560 d128, 160 calls), the device
idle for ``gap`` ms after each, the SM clock and power read after each. Gaps are
interleaved in shuffled order, repeated; triton's ``do_bench_cudagraph`` of the same calls
before and after all trials, for comparison. Prints JSON: per gap and kernel, each trial's
median and its seven samples' max/min, the median clock; and triton's medians.

    PYTHONPATH=src python3 benchmarks/sample_gaps.py > sample-gaps.json      # about 130 s
    PYTHONPATH=src python3 benchmarks/sample_gaps.py --gaps 13,20,25,30 --rest-first
"""

import argparse
import json
import random
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from replays import identity, replay_us

from inference_kernels.judge import busy, clocks, timing

GAPS_MS = [0, 5, 13, 30, 60, 120]
SAMPLES = 7
REPEATS = 4
BETWEEN_CASES = 1.5  # seconds of background load before a trial
STEADY = 0.3  # seconds of the referee's steady load right before the samples
CALLS = {"gemm": 50, "sdpa": 160}  # about 27 ms a replay on an H200


def calls() -> dict:
    g = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape, scale=1.0):
        return (torch.randn(shape, device="cuda", generator=g) * scale).bfloat16()

    a, b = randn(4096, 4096), randn(12288, 4096, scale=0.02)
    q, k, v = (randn(1, 32, 2560, 128) for _ in range(3))
    return {
        "gemm": lambda: F.linear(a, b),
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
    }


def graph(call, count: int) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    made = torch.cuda.CUDAGraph()
    with torch.cuda.graph(made):
        for _ in range(count):
            call()
    torch.cuda.synchronize()
    return made


def samples(
    made: torch.cuda.CUDAGraph, count: int, gap: float, read, rest_first: bool = False
) -> tuple[list, list]:
    """Seven timed replays, ``gap`` seconds of idle after each (``rest_first``: before the
    first too, as the judge does, sampling.SAMPLE_GAP_SECONDS): (us per call, readings)."""
    readings: list = []
    if rest_first:
        time.sleep(gap)

    def after() -> None:
        readings.append(read())
        time.sleep(gap)

    times = replay_us(made, count, SAMPLES, after=after)
    return times, [r for r in readings if r is not None]


def triton_medians(made_calls: dict) -> dict:
    try:
        from triton.testing import do_bench_cudagraph
    except ImportError:
        return {}
    return {
        name: round(statistics.median(do_bench_cudagraph(call) * 1e3 for _ in range(5)), 2)
        for name, call in made_calls.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--gaps",
        type=lambda text: [int(gap) for gap in text.split(",")],
        default=GAPS_MS,
        help=f"idle gaps in ms, comma-separated (default {','.join(map(str, GAPS_MS))})",
    )
    parser.add_argument(
        "--rest-first",
        action="store_true",
        help="rest the gap after the steady load too, before the first sample",
    )
    options = parser.parse_args()
    device = torch.device("cuda", 0)  # busy.products sets the device: it needs an index
    read = clocks.reader(device) or (lambda: None)
    made_calls = calls()
    graphs = {name: graph(call, CALLS[name]) for name, call in made_calls.items()}
    background = busy.Busy(busy.products(device))
    timing.load(device, 10.0)  # the referee's preheat
    triton_before = triton_medians(made_calls)
    order = [(gap, name) for gap in options.gaps for name in graphs for _ in range(REPEATS)]
    random.Random(0).shuffle(order)
    trials = []
    for gap, name in order:
        background.start()
        time.sleep(BETWEEN_CASES)
        background.stop()
        timing.load(device, STEADY)
        times, readings = samples(graphs[name], CALLS[name], gap / 1e3, read, options.rest_first)
        trial = {
            "gap_ms": gap,
            "kernel": name,
            "median_us": round(statistics.median(times), 2),
            "max_over_min": round(max(times) / min(times), 4),
            "samples_us": [round(t, 2) for t in times],
            "sm_mhz": [r.sm_mhz for r in readings],
            "power_w": [round(r.power_w) for r in readings],
        }
        trials.append(trial)
        print(json.dumps(trial), file=sys.stderr, flush=True)
    triton_after = triton_medians(made_calls)
    summary = {}
    for gap in options.gaps:
        for name in graphs:
            mine = [t for t in trials if (t["gap_ms"], t["kernel"]) == (gap, name)]
            medians = [t["median_us"] for t in mine]
            summary[f"{name}, gap {gap} ms"] = {
                "medians_us": medians,
                "median_us": round(statistics.median(medians), 2),
                "across_trials_max_over_min": round(max(medians) / min(medians), 4),
                "within_trial_max_over_min": [t["max_over_min"] for t in mine],
                "median_sm_mhz": statistics.median([m for t in mine for m in t["sm_mhz"]] or [0]),
            }
    print(
        json.dumps(
            {
                **identity(device),
                "rest_first": options.rest_first,
                "triton_before_us": triton_before,
                "triton_after_us": triton_after,
                "summary": summary,
                "trials": trials,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
