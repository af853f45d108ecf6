"""Where a graph's setup goes (issue 13): the steps of ``timing.capture``, timed apart.

A case's ``setup`` step was 0.07-0.44 s on the H200 (probe at c1ce947) for graphs of 17 to
670 calls. This times, on CUDA, for a few call shapes and counts, each step that
``timing.capture`` takes in a worker: the eager warmup calls, entering the capture
(``torch.cuda.graph``: synchronize, empty the allocator's cache), recording the calls,
leaving it (the graph's instantiation), and the first replay (its upload); then the same
for a graph of more calls that extends the first (``timing.Graphs``), and the whole graph
again after as many eager calls' outputs were freed (a worker's state before a capture:
entering the capture gives the cached blocks back to the driver). Prints JSON, seconds.

Each is timed twice: on an idle device, and beside the referee's background load run by
another process (``judge/busy.py``'s products, as in an audit's sustained regime, where
a case's setup runs under that load: the setup grew by 0.12 s a case on the H200 at
c839524 against ae23d6d, docs/measurements/case-breakdown.md). Two variants say what a
change would save: ``warmup_1`` (one eager call before the capture instead of the plan's
ten: the worker has already made calls in the case), ``keep_cache`` (the capture begun on
a side stream without ``torch.cuda.graph``, which empties the allocator's cache first).

    PYTHONPATH=src python3 benchmarks/capture_cost.py
"""

from __future__ import annotations

import json
import multiprocessing as mp
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


def steps(slots, warmup: int, device, keep_cache: bool = False) -> dict[str, float]:
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
    if keep_cache:
        context = _KeepCache(graph, device)
    else:
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


class _KeepCache:
    """A capture on a side stream of its own, begun without emptying the allocator's cache
    (what ``torch.cuda.graph`` does first, after a device-wide synchronize)."""

    def __init__(self, graph, device):
        self.graph, self.device = graph, device
        self.stream = torch.cuda.Stream(device)

    def __enter__(self):
        torch.cuda.synchronize(self.device)
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        self.context = torch.cuda.stream(self.stream)
        self.context.__enter__()
        self.graph.capture_begin()

    def __exit__(self, *error):
        try:
            self.graph.capture_end()
        finally:
            self.context.__exit__(*error)
        torch.cuda.current_stream(self.device).wait_stream(self.stream)


def _load(stop) -> None:
    """The referee's background load, from a process of its own, until ``stop`` is set."""
    from inference_kernels.judge.busy import products

    one_round = products(torch.device("cuda"))()
    while not stop.is_set():
        one_round()


def _measure(device) -> dict:
    report = {}
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
            "whole_warmup_1": steps(slots, 1, device),
            "whole_keep_cache": steps(slots, warmup, device, keep_cache=True),
        }
        # As in a worker: its eager samples' outputs freed just before, so entering the
        # capture (which empties the allocator's cache) has cached blocks to give back.
        for variant, keep in (("after_eager_outputs", False), ("after_eager_keep_cache", True)):
            outputs = [slot() for slot in slots]
            del outputs
            report[name][variant] = steps(slots, warmup, device, keep_cache=keep)
        del slots
    return report


def main() -> None:
    device = torch.device("cuda")
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    report["idle"] = _measure(device)
    context = mp.get_context("spawn")
    stop = context.Event()
    load = context.Process(target=_load, args=(stop,), daemon=True)
    load.start()
    time.sleep(3.0)  # its start (torch, a context) and the device at its load's clocks
    try:
        report["loaded"] = _measure(device)
    finally:
        stop.set()
        load.join(timeout=10)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
