"""Timing CUDA-graph replays with events, shared by the benchmarks."""

from __future__ import annotations

from collections.abc import Callable

import torch


def captured(call: Callable[[], object], calls: int) -> torch.cuda.CUDAGraph:
    """A CUDA graph of ``calls`` calls of ``call``, captured after one warm call."""
    call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    return graph


def replay_us(
    graph: torch.cuda.CUDAGraph, calls: int, replays: int, after: Callable[[], None] | None = None
) -> list[float]:
    """Microseconds per call of each of ``replays`` replays of ``graph`` (which holds
    ``calls`` calls), each timed alone with CUDA events; ``after`` runs after each replay
    (a clock reading)."""
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
        if after is not None:
            after()
    return times


def identity(device: torch.device) -> dict[str, str]:
    """The GPU a benchmark ran on, for its JSON (medians of different GPUs differ)."""
    props = torch.cuda.get_device_properties(device)
    return {"device": props.name, "uuid": str(props.uuid)}
