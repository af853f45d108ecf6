"""Does the judge's CUDA-graph timing agree with triton.testing.do_bench_cudagraph?

Times a bf16 GEMM (M=4096, N=12288, K=4096) and the dataset's dense attention shape
(SDPA, B=1, H=32, N=2560, D=128) five times each, with the judge's graph timing (as the
worker runs it: rotating input copies, iters calls per replay, median of trials) and
with triton's do_bench_cudagraph (its defaults), and prints JSON: medians, their ratio, and the
run-to-run spread (max/min - 1) of each. For comparison it also times the judge with its
samples taken back to back (SAMPLE_WINDOW_SECONDS = 0), as before the samples were spread.
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


def judge_graph_us(inputs, function, window: float) -> float:
    sets = make_copies(inputs, 4)
    timing.SAMPLE_WINDOW_SECONDS = window
    measured, _ = timing.graph(
        lambda j: [function(*sets[j % len(sets)])], WARMUP, ITERS, TRIALS, torch.device("cuda")
    )
    return measured.median_us


def figures(runs: list[float]) -> dict:
    return {
        "runs_us": [round(x, 2) for x in runs],
        "median_us": round(statistics.median(runs), 2),
        "spread": round(max(runs) / min(runs) - 1, 4),
    }


def main() -> None:
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for name, make in (
        ("gemm_bf16_m4096_n12288_k4096", gemm_inputs),
        ("sdpa_b1_h32_n2560_d128", sdpa_inputs),
    ):
        inputs, function = make()
        window = timing.SAMPLE_WINDOW_SECONDS
        judged = [judge_graph_us(inputs, function, window) for _ in range(RUNS)]
        back_to_back = [judge_graph_us(inputs, function, 0.0) for _ in range(RUNS)]
        timing.SAMPLE_WINDOW_SECONDS = window
        triton = [
            do_bench_cudagraph(lambda f=function, x=inputs: f(*x)) * 1000 for _ in range(RUNS)
        ]
        entry = {
            "judge": figures(judged),
            "judge_samples_back_to_back": figures(back_to_back),
            "triton_do_bench_cudagraph": figures(triton),
        }
        ours, theirs = entry["judge"]["median_us"], entry["triton_do_bench_cudagraph"]["median_us"]
        entry["ratio"] = round(ours / theirs, 4)
        report[name] = entry
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
