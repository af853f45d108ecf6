"""Does the judge's CUDA-graph timing agree with triton.testing.do_bench_cudagraph?

Times a bf16 GEMM (M=4096, N=12288, K=4096) and the dataset's dense attention shape
(SDPA, B=1, H=32, N=2560, D=128) five times each with the judge's graph timing, as the
worker runs it (rotating input copies, ``iters`` calls per replay, median of ``trials``
samples spread over ``timing.SAMPLE_WINDOW_SECONDS``), and with triton's
do_bench_cudagraph (its defaults). Prints JSON: per method the five run medians, their
median, the run-to-run spread (max/min - 1) and coefficient of variation, and the ratio
of the judge's median to triton's. Other sampling variants are timed for comparison:
the judge's earlier 0.25 s of steady replays and a 3 s window. First the GPU is loaded
for ``timing.PREHEAT_SECONDS``, as a judge worker does before its first timed case.
Each run's start (unix seconds) is kept, to line runs up with a clock log such as
``nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 50``.
Run on a CUDA machine:

    PYTHONPATH=src python3 benchmarks/timing_fidelity.py
"""

import json
import statistics
import time

import torch
import torch.nn.functional as F
from triton.testing import do_bench_cudagraph

from inference_kernels.judge import timing
from inference_kernels.judge.guards import make_copies

RUNS = 5
WARMUP, ITERS, TRIALS = 10, 20, 7  # the dataset's task timing
STEADY = timing.STEADY_SECONDS
# label: (steady seconds, sample window in seconds, samples); "judge" is the judge's own
VARIANTS = {
    "judge": (STEADY, timing.SAMPLE_WINDOW_SECONDS, TRIALS),
    "judge_steady_0.25s": (0.25, timing.SAMPLE_WINDOW_SECONDS, TRIALS),
    "judge_window_3s": (STEADY, 3.0, TRIALS),
}


def gemm_inputs():
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(4096, 4096, device="cuda", generator=g).bfloat16()
    w = (torch.randn(12288, 4096, device="cuda", generator=g) * 0.02).bfloat16()
    return [a, w], lambda a, w: F.linear(a, w)


def sdpa_inputs():
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (
        torch.randn(1, 32, 2560, 128, device="cuda", generator=g).bfloat16() for _ in range(3)
    )
    return [q, k, v], lambda q, k, v: F.scaled_dot_product_attention(q, k, v)


def judge_graph(inputs, function, steady: float, window: float, trials: int):
    sets = make_copies(inputs, 4)
    defaults = timing.STEADY_SECONDS, timing.SAMPLE_WINDOW_SECONDS
    timing.STEADY_SECONDS, timing.SAMPLE_WINDOW_SECONDS = steady, window
    try:
        measured, _ = timing.graph(
            lambda j: [function(*sets[j % len(sets)])],
            WARMUP,
            ITERS,
            trials,
            torch.device("cuda"),
        )
    finally:
        timing.STEADY_SECONDS, timing.SAMPLE_WINDOW_SECONDS = defaults
    return measured


def figures(runs: list[float], started: list[float], samples: list | None = None) -> dict:
    entry = {
        "runs_us": [round(x, 2) for x in runs],
        "runs_started_unix_s": [round(x, 2) for x in started],
        "median_us": round(statistics.median(runs), 2),
        "spread": round(max(runs) / min(runs) - 1, 4),
        "cv": round(statistics.stdev(runs) / statistics.mean(runs), 4),
    }
    if samples:
        entry["samples_us"] = [[round(x, 1) for x in run] for run in samples]
    return entry


def main() -> None:
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    report["preheat_s"] = round(timing.preheat(torch.device("cuda")), 2)
    for name, make in (
        ("gemm_bf16_m4096_n12288_k4096", gemm_inputs),
        ("sdpa_b1_h32_n2560_d128", sdpa_inputs),
    ):
        inputs, function = make()
        entry = {}
        for label, variant in VARIANTS.items():
            started, measured = [], []
            for _ in range(RUNS):
                started.append(time.time())
                measured.append(judge_graph(inputs, function, *variant))
            entry[label] = figures(
                [m.median_us for m in measured], started, [m.samples_us for m in measured]
            )
        started, triton = [], []
        for _ in range(RUNS):
            started.append(time.time())
            triton.append(do_bench_cudagraph(lambda f=function, x=inputs: f(*x)) * 1000)
        entry["triton_do_bench_cudagraph"] = figures(triton, started)
        ours, theirs = entry["judge"]["median_us"], entry["triton_do_bench_cudagraph"]["median_us"]
        entry["ratio"] = round(ours / theirs, 4)
        report[name] = entry
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
