"""Where a graph's setup goes (issue 13): the steps of ``timing.capture``, timed apart.

A case's ``setup`` step was 0.07-0.44 s on the H200 (probe at c1ce947) for graphs of 17 to
670 calls. This times, on CUDA, for a few call shapes and counts, each step that
``timing.capture`` takes in a worker: the eager warmup calls, entering the capture
(``torch.cuda.graph``: synchronize, empty the allocator's cache), recording the calls,
leaving it (the graph's instantiation), and the first replay (its upload); then the same
for a graph of more calls that extends the first (``timing.Graphs``), and the whole graph
again after as many eager calls' outputs were freed (a worker's state before a capture:
entering the capture gives the cached blocks back to the driver). Prints JSON, seconds.

    PYTHONPATH=src python3 benchmarks/capture_cost.py
"""

from __future__ import annotations

import json
import time

import torch
import torch.nn.functional as F


def _gemm(device):
    a = torch.randn(4096, 4096, device=device).bfloat16()
    sets = [(torch.randn(12288, 4096, device=device) * 0.02).bfloat16() for _ in range(20)]
    return [lambda w=w: F.linear(a, w) for w in sets]


def _small_ops(device, calls=500, ops=30):
    """A launch-bound call: ``ops`` small elementwise kernels (a plain-PyTorch decode step)."""
    sets = [torch.randn(8, 128, 128, device=device) for _ in range(calls)]

    def call(x):
        y = x
        for _ in range(ops // 3):
            y = torch.sigmoid(y) * x + 1.0
        return y

    return [lambda x=x: call(x) for x in sets]


def steps(slots, warmup: int, device) -> dict[str, float]:
    sync = torch.cuda.synchronize
    times = {}
    began = time.perf_counter()
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for i in range(max(1, warmup)):
            slots[i % len(slots)]()
    torch.cuda.current_stream(device).wait_stream(side)
    sync(device)
    times["warmup"] = time.perf_counter() - began
    graph = torch.cuda.CUDAGraph()
    context = torch.cuda.graph(graph)
    began = time.perf_counter()
    context.__enter__()
    times["enter"] = time.perf_counter() - began
    began = time.perf_counter()
    outputs = [slot() for slot in slots]
    times["record"] = time.perf_counter() - began
    began = time.perf_counter()
    context.__exit__(None, None, None)
    sync(device)
    times["exit"] = time.perf_counter() - began
    began = time.perf_counter()
    graph.replay()
    sync(device)
    times["first_replay"] = time.perf_counter() - began
    began = time.perf_counter()
    graph.replay()
    sync(device)
    times["second_replay"] = time.perf_counter() - began
    del outputs
    return {k: round(v, 5) for k, v in times.items()}


def main() -> None:
    device = torch.device("cuda")
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for name, make, warmup in (
        ("gemm_20_calls", _gemm, 10),
        ("small_ops_500_calls", _small_ops, 10),
    ):
        slots = make(device)
        steps(slots[:4], warmup, device)  # the process's first capture pays once
        report[name] = {
            "first": steps(slots[: len(slots) // 2], warmup, device),
            "extension": steps(slots[len(slots) // 2 :], warmup, device),
            "whole": steps(slots, warmup, device),
        }
        # As in a worker: its eager samples' outputs freed just before, so entering the
        # capture (which empties the allocator's cache) has cached blocks to give back.
        outputs = [slot() for slot in slots]
        del outputs
        report[name]["after_eager_outputs"] = steps(slots, warmup, device)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
