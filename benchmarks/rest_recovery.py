"""How long a load must follow a rest before a kernel times as it does on a busy device?

In the sustained regime the referee keeps the device loaded between cases (judge/busy.py)
and stops the load for a case's first call, which the solution runs alone (a solution that
tunes itself in its first call must see an idle device). That call can take a second (cuDNN
plans a new shape); the referee then loads the device for as long as it rested (at most
STEADY_SECONDS) before the samples. On the whole dataset that load was 238 s of an
estimated 1,603 s audit (docs/measurements/case-breakdown.md).

This benchmark takes the judge out and asks the device directly. Each trial keeps the
device under the referee's background load for a while (a lane between cases), rests for
``rest`` seconds (a first call: 0.2 s, a cuDNN plan's 1 s, a compile's 5 s), loads it with
the referee's steady load (``timing.load``) for ``load`` seconds, then times a GEMM (M4096
N12288 K4096) and an SDPA (B1 h32 N2560 d128) in CUDA graphs, seven replays each, reading
the SM clock and power after each. Conditions are interleaved in a shuffled order,
repeated; the first condition (no rest) is the busy device's time, the one every other is
compared with. During the first 1 s load after 1 s of rest the SM clock is read every
chunk of products, to show how fast it falls back to the power-capped clock.

    PYTHONPATH=src python3 benchmarks/rest_recovery.py > rest-recovery.json
"""

import json
import random
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from replays import identity, replay_us

from inference_kernels.judge import busy, clocks, timing

CALLS = 20  # per graph replay
REPLAYS = 7
BETWEEN_CASES = 1.5  # seconds of background load before each trial
# (rest, load) in seconds; the first is the busy device. The judge's rule
# (referee.steady_seconds): 0.05 s of load after a rest under 0.05 s, else 0.3 s (of which
# the background load run since the rest counts).
CONDITIONS = [
    (0.0, 0.05),
    (0.2, 0.05),
    (0.2, 0.3),
    (1.0, 0.05),
    (1.0, 0.3),
    (1.0, 1.0),
    (5.0, 0.3),
    (5.0, 1.0),
]
TRACED = (1.0, 1.0)
REPEATS = 3


def graphs() -> dict[str, torch.cuda.CUDAGraph]:
    g = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape, scale=1.0):
        return (torch.randn(shape, device="cuda", generator=g) * scale).bfloat16()

    a, b = randn(4096, 4096), randn(12288, 4096, scale=0.02)
    q, k, v = (randn(1, 32, 2560, 128) for _ in range(3))
    calls = {
        "gemm": lambda: F.linear(a, b),
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
    }
    made = {}
    for name, call in calls.items():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                call()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(CALLS):
                call()
        made[name] = graph
    torch.cuda.synchronize()
    return made


def traced_load(device: torch.device, seconds: float, read) -> list[tuple[float, int, float]]:
    """The referee's steady load, with (seconds since its start, SM MHz, W) after each
    chunk of products."""
    a = torch.randn(8192, 8192, device=device).bfloat16()
    trace, began = [], time.perf_counter()
    while time.perf_counter() - began < seconds:
        for _ in range(10):
            torch.mm(a, a)
        torch.cuda.synchronize(device)
        reading = read()
        if reading is not None:
            trace.append((round(time.perf_counter() - began, 4), reading.sm_mhz, reading.power_w))
    return trace


def main() -> None:
    device = torch.device("cuda", 0)  # busy.products sets the device: it needs an index
    read = clocks.reader(device) or (lambda: None)
    made = graphs()
    background = busy.Busy(busy.products(device))
    conditions = CONDITIONS
    order = [c for c in conditions for _ in range(REPEATS)]
    random.Random(0).shuffle(order)
    timing.load(device, 10.0)  # the referee's preheat
    trials, trace = [], None
    for rest, load in order:
        background.start()
        time.sleep(BETWEEN_CASES)
        background.stop()
        time.sleep(rest)
        if (rest, load) == TRACED and trace is None:
            trace = traced_load(device, load, read)
        else:
            timing.load(device, load)
        trial = {"rest_s": rest, "load_s": load}
        for name, graph in made.items():
            readings = []
            times = replay_us(graph, CALLS, REPLAYS, after=lambda r=readings: r.append(read()))
            readings = [r for r in readings if r is not None]
            trial[name] = {
                "median_us": round(statistics.median(times), 2),
                "sm_mhz": [r.sm_mhz for r in readings],
                "power_w": [round(r.power_w) for r in readings],
            }
        trials.append(trial)
        print(json.dumps(trial), file=sys.stderr, flush=True)
    summary = {}
    for rest, load in conditions:
        mine = [t for t in trials if (t["rest_s"], t["load_s"]) == (rest, load)]
        summary[f"rest {rest} s, load {load} s"] = {
            name: {
                "median_us": [t[name]["median_us"] for t in mine],
                "median_sm_mhz": statistics.median(
                    [m for t in mine for m in t[name]["sm_mhz"]] or [0]
                ),
            }
            for name in made
        }
    print(
        json.dumps(
            {
                **identity(device),
                "summary": summary,
                "trials": trials,
                "load_trace": trace,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
