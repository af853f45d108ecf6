"""Where an eager call's time goes beyond its kernels, against a CUDA graph of the same
calls (issue 11): plain PyTorch, no judge.

For a GEMM (M4096 N12288 K4096) and an SDPA (B1 h32 N2560 d128, the task baseline's code)
it times, in interleaved rounds after one shared load, a loop of eager calls and a graph
replay of the same calls (CUDA events around each, as the judge does), each call on its
own input set; then traces one eager loop and one replay with CUPTI and reports per call:
kernels, their summed duration, the idle gaps between one kernel's end and the next one's
start, and the host's time to issue the eager calls. If eager minus graph is the gaps, and
the host issues calls faster than the device runs them, the difference is launch cost on
the device side, not a state of the device.

Each condition starts like one regime: after 0.5 s of rest (burst) or 0.3 s of load
(sustained), with each device-side lead before the start events (``--leads``, us), for
each count of calls per sample (``--calls``): eager = per call + fixed / calls tells a
per-sample cost from a per-call one.

    python3 benchmarks/launch_gaps.py [--calls 50 200] [--leads 0 200] > launch-gaps.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile


def gemm_case(device):
    a = [torch.randn(4096, 4096, device=device, dtype=torch.bfloat16) for _ in range(4)]
    b = [torch.randn(12288, 4096, device=device, dtype=torch.bfloat16) for _ in range(4)]
    return [lambda i=i: a[i] @ b[i].T for i in range(4)]


def sdpa_case(device):
    def run(q, k, v):  # the task baseline's code
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).contiguous()

    sets = [
        [torch.randn(1, 2560, 32, 128, device=device, dtype=torch.bfloat16) for _ in range(3)]
        for _ in range(8)
    ]
    return [lambda s=s: run(*s) for s in sets]


LEAD_CYCLES_PER_US = 2000  # torch.cuda._sleep spins cycles; about 1 us at 2 GHz


def lead(us):
    """Keep the device busy for about ``us`` before the start event, so that the host has
    queued the first calls when the device reaches it (0: nothing)."""
    if us:
        torch.cuda._sleep(int(us * LEAD_CYCLES_PER_US))


def eager(slots, calls, device, lead_us=0.0):
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    began = time.perf_counter()
    lead(lead_us)
    start.record()
    outputs = [slots[i % len(slots)]() for i in range(calls)]
    issued = time.perf_counter() - began
    end.record()
    torch.cuda.synchronize(device)
    del outputs
    return start.elapsed_time(end) * 1e3 / calls, issued * 1e6 / calls


def capture(slots, calls, device):
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for slot in slots:
            slot()
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kept = [slots[i % len(slots)]() for i in range(calls)]
    torch.cuda.synchronize(device)
    return graph, kept


def replay(graph, calls, device, lead_us=0.0):
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    lead(lead_us)
    start.record()
    graph.replay()
    end.record()
    torch.cuda.synchronize(device)
    return start.elapsed_time(end) * 1e3 / calls


def traced(work, calls, device) -> dict:
    """Kernels per call, their us per call, idle gap us per call between them."""
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        work()
        torch.cuda.synchronize(device)
    spans, others = [], {}
    for event in prof.profiler.kineto_results.events():
        kind = event.activity_type() if hasattr(event, "activity_type") else None
        name = event.name()
        on_device = event.device_type() == torch.autograd.DeviceType.CUDA
        if kind not in (None, "kernel") and on_device:
            others[f"{kind}: {name[:60]}"] = others.get(f"{kind}: {name[:60]}", 0) + 1 / calls
        older_kernel = (
            on_device and not name.startswith(("Memcpy", "Memset")) and "Sync" not in name
        )
        if kind == "kernel" or (kind is None and older_kernel):
            spans.append((event.start_ns(), event.start_ns() + event.duration_ns(), name[:80]))
    spans.sort()
    gaps = [max(0, b[0] - a[1]) for a, b in zip(spans, spans[1:], strict=False)]
    names: dict[str, int] = {}
    for _, _, name in spans:
        names[name] = names.get(name, 0) + 1
    return {
        "kernels_per_call": len(spans) / calls,
        "kernel_us_per_call": sum(e - s for s, e, _ in spans) / 1e3 / calls,
        "gap_us_per_call": sum(gaps) / 1e3 / calls,
        "gap_median_us": statistics.median(gaps) / 1e3 if gaps else None,
        "names": {n: c / calls for n, c in names.items()},
        "other_device_events_per_call": others,
    }


def trace_both(slots, graph, calls, device) -> dict:
    return {
        "eager_trace": traced(lambda: eager(slots, calls, device), calls, device),
        "graph_trace": traced(lambda: replay(graph, calls, device), calls, device),
    }


def measure(slots, graph, calls, rounds, rest_s, load_s, lead_us, device) -> dict:
    """Interleaved rounds (eager, graph) after ``rest_s`` of idle and ``load_s`` of load."""
    time.sleep(rest_s)
    ended = time.monotonic() + load_s
    while time.monotonic() < ended:
        replay(graph, calls, device)
    eagers, hosts, graphs = [], [], []
    for _ in range(rounds):
        us, host = eager(slots, calls, device, lead_us)
        eagers.append(us)
        hosts.append(host)
        graphs.append(replay(graph, calls, device, lead_us))
    e, g = statistics.median(eagers), statistics.median(graphs)
    return {
        "calls": calls,
        "rest_s": rest_s,
        "load_s": load_s,
        "lead_us": lead_us,
        "eager_us": round(e, 2),
        "graph_us": round(g, 2),
        "eager_over_graph": round(e / g, 4),
        "eager_samples": [round(x, 1) for x in eagers],
        "graph_samples": [round(x, 1) for x in graphs],
        "host_issue_us_per_call": round(statistics.median(hosts), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, nargs="+", default=[100], help="per sample")
    parser.add_argument("--leads", type=float, nargs="+", default=[0.0, 200.0], help="us")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=2, help="of each condition, shuffled")
    args = parser.parse_args()
    device = torch.device("cuda:0")
    report = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__}
    conditions = [  # (rest, load, lead): the burst regime's start, the sustained one's
        (rest, load, lead) for rest, load in ((0.5, 0.0), (0.0, 0.3)) for lead in args.leads
    ] * args.repeats
    cases = (("gemm_m4096_n12288_k4096", gemm_case), ("sdpa_b1_h32_n2560_d128", sdpa_case))
    for name, make in cases:
        slots = make(device)
        report[name] = {"runs": []}
        for calls in args.calls:
            graph, kept = capture(slots, calls, device)
            for _ in range(3):
                eager(slots, calls, device)
                replay(graph, calls, device)
            random.shuffle(conditions)
            for condition in conditions:
                run = measure(slots, graph, calls, args.rounds, *condition, device)
                report[name]["runs"].append(run)
            if calls == args.calls[0]:
                report[name] |= trace_both(slots, graph, calls, device)
            del graph, kept
        report[name]["runs"].sort(key=lambda r: (r["load_s"], r["calls"], r["lead_us"]))
        print(json.dumps({name: report[name]}), flush=True, file=sys.stderr)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
