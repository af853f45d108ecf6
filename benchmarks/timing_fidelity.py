"""Does the judge's CUDA-graph timing agree with triton.testing.do_bench_cudagraph?

Times a bf16 GEMM (M=4096, N=12288, K=4096) and the dataset's dense attention shape
(SDPA, B=1, H=32, N=2560, D=128) five times each with the judge's graph timing, as the
worker runs it (rotating input copies, ``iters`` calls per replay, median of ``trials``
samples spread over ``timing.SAMPLE_WINDOW_SECONDS``), and with triton's
do_bench_cudagraph (its defaults). Prints JSON: per method the five run medians, their
median, the run-to-run spread (max/min - 1) and coefficient of variation, and the ratio
of the judge's median to triton's. Other sampling variants are timed for comparison:
samples back to back (window 0, as before the samples were spread), a 3 s window, and
50 samples in the 1 s window.
Run on a CUDA machine:

    PYTHONPATH=src python3 benchmarks/timing_fidelity.py
"""

import json
import statistics

import torch
import torch.nn.functional as F
from triton.testing import do_bench_cudagraph

from inference_kernels.judge import timing
from inference_kernels.judge.guards import make_copies

RUNS = 5
WARMUP, ITERS, TRIALS = 10, 20, 7  # the dataset's task timing
VARIANTS = {  # label: (sample window in seconds, samples); "judge" is the judge's own setting
    "judge": (timing.SAMPLE_WINDOW_SECONDS, TRIALS),
    "judge_samples_back_to_back": (0.0, TRIALS),
    "judge_window_3s": (3.0, TRIALS),
    "judge_window_1s_50_samples": (1.0, 50),
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


def judge_graph(inputs, function, window: float, trials: int) -> timing.Measurement:
    sets = make_copies(inputs, 4)
    default = timing.SAMPLE_WINDOW_SECONDS
    timing.SAMPLE_WINDOW_SECONDS = window
    try:
        measured, _ = timing.graph(
            lambda j: [function(*sets[j % len(sets)])],
            WARMUP,
            ITERS,
            trials,
            torch.device("cuda"),
        )
    finally:
        timing.SAMPLE_WINDOW_SECONDS = default
    return measured


def figures(runs: list[float], samples: list[list[float]] | None = None) -> dict:
    entry = {
        "runs_us": [round(x, 2) for x in runs],
        "median_us": round(statistics.median(runs), 2),
        "spread": round(max(runs) / min(runs) - 1, 4),
        "cv": round(statistics.stdev(runs) / statistics.mean(runs), 4),
    }
    if samples:
        entry["samples_us"] = [[round(x, 1) for x in run] for run in samples]
    return entry


def main() -> None:
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for name, make in (
        ("gemm_bf16_m4096_n12288_k4096", gemm_inputs),
        ("sdpa_b1_h32_n2560_d128", sdpa_inputs),
    ):
        inputs, function = make()
        entry = {}
        for label, (window, trials) in VARIANTS.items():
            measured = [judge_graph(inputs, function, window, trials) for _ in range(RUNS)]
            entry[label] = figures(
                [m.median_us for m in measured], [m.samples_us for m in measured]
            )
        triton = [
            do_bench_cudagraph(lambda f=function, x=inputs: f(*x)) * 1000 for _ in range(RUNS)
        ]
        entry["triton_do_bench_cudagraph"] = figures(triton)
        ours, theirs = entry["judge"]["median_us"], entry["triton_do_bench_cudagraph"]["median_us"]
        entry["ratio"] = round(ours / theirs, 4)
        report[name] = entry
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
