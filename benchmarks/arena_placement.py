"""Does where a kernel's inputs live change its time?

The judge lends each case slices of one arena per worker (a dedicated cuMemAlloc shared
with the worker through an IPC handle, judge/workers.py). On the H200 the same baseline
ran 6% (GEMM) and 22% (SDPA) slower in some workers than in others, by arena size and
number of workers (docs/measurements/h200-regimes.md). This benchmark takes the judge out:
one process times a GEMM (M4096 N12288 K4096) and an SDPA (B1 h32 N2560 d128) in a CUDA
graph with their inputs in torch's own buffers, in arenas of several sizes (at the start
and at the end), and after other arenas already hold memory; each placement's graph median,
SM clock and power, and the names of the kernels that ran. A second process maps an arena
through its IPC handle, as a worker does, and times the same calls there.

    PYTHONPATH=src python3 benchmarks/arena_placement.py > placement.json
"""

import json
import statistics
import sys
import time

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from replays import captured, replay_us

from inference_kernels.judge import clocks, cuda_ipc

GIB = 1 << 30
CALLS = 20  # per graph replay
REPLAYS = 9
LOAD_SECONDS = 1.0  # replays before the timed ones, so every placement starts warm
SHAPES = {
    "gemm": [((4096, 4096), 1.0), ((12288, 4096), 0.02)],
    "sdpa": [((1, 32, 2560, 128), 1.0)] * 3,
}


def call_of(kind: str, tensors: list[torch.Tensor]):
    if kind == "gemm":
        return lambda: F.linear(tensors[0], tensors[1])
    return lambda: F.scaled_dot_product_attention(*tensors)


def fill(views: list[torch.Tensor], kind: str) -> list[torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(0)
    for view, (shape, scale) in zip(views, SHAPES[kind], strict=True):
        view.copy_((torch.randn(shape, device="cuda", generator=g) * scale).bfloat16())
    return views


def own(kind: str) -> list[torch.Tensor]:
    return fill(
        [torch.empty(shape, device="cuda", dtype=torch.bfloat16) for shape, _ in SHAPES[kind]], kind
    )


def in_arena(arena: torch.Tensor, kind: str, at_end: bool) -> list[torch.Tensor]:
    sizes = [2 * torch.Size(shape).numel() for shape, _ in SHAPES[kind]]
    start = arena.numel() - sum(sizes) - 4096 if at_end else 0
    start -= start % 256
    views = []
    for (shape, _), size in zip(SHAPES[kind], sizes, strict=True):
        views.append(arena[start : start + size].view(torch.bfloat16).view(shape))
        start += -(-size // 256) * 256
    return fill(views, kind)


def kernels(call) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    return sorted({e.name[:90] for e in prof.events() if e.device_type.name == "CUDA"})


def timed(call, read) -> dict:
    graph = captured(call, CALLS)
    begin = time.perf_counter()
    while time.perf_counter() - begin < LOAD_SECONDS:
        graph.replay()
        torch.cuda.synchronize()
    mhz, watts = [], []

    def reading() -> None:
        found = read() if read else None
        if found:
            mhz.append(found.sm_mhz)
            watts.append(found.power_w)

    times = replay_us(graph, CALLS, REPLAYS, reading)
    return {
        "us": round(statistics.median(times), 2),
        "sm_mhz": statistics.median(mhz) if mhz else None,
        "power_w": round(statistics.median(watts), 1) if watts else None,
    }


def measure(label: str, kind: str, tensors: list[torch.Tensor], read) -> dict:
    call = call_of(kind, tensors)
    entry = {
        "placement": label,
        "kind": kind,
        "address": hex(tensors[0].data_ptr()),
        **timed(call, read),
    }
    entry["kernels"] = kernels(call)
    print(json.dumps(entry), file=sys.stderr)
    return entry


def mapped(handle: str, size: int, queue) -> None:
    """In a second process: the arena mapped through its handle, as a worker maps it."""
    torch.cuda.set_device(0)
    torch.empty(1, device="cuda")
    imports = cuda_ipc.Imports(torch.device("cuda:0"))
    arena = imports.open(handle)
    read = clocks.reader(torch.device("cuda:0"))
    queue.put(
        [
            measure(f"ipc {size // GIB} GiB start", kind, in_arena(arena, kind, False), read)
            for kind in SHAPES
        ]
    )


def main() -> None:
    device = torch.device("cuda:0")
    read = clocks.reader(device)
    rows = []
    for kind in SHAPES:
        rows.append(measure("own buffers", kind, own(kind), read))
    held = []
    for size in (1.6, 4, 16, 35):
        arena = cuda_ipc.Allocation.create(int(size * GIB) // 256 * 256, device)
        for kind in SHAPES:
            for at_end in (False, True):
                label = f"arena {size} GiB {'end' if at_end else 'start'}"
                rows.append(measure(label, kind, in_arena(arena.tensor, kind, at_end), read))
        held.append(arena)
    # Five arenas of 16 GiB, as five workers of a job held them: the fifth's placement.
    for arena in held:
        arena.free()
    held = [cuda_ipc.Allocation.create(16 * GIB, device) for _ in range(5)]
    for index, arena in enumerate(held):
        for kind in SHAPES:
            rows.append(
                measure(
                    f"16 GiB arena {index + 1} of 5",
                    kind,
                    in_arena(arena.tensor, kind, False),
                    read,
                )
            )
    context = mp.get_context("spawn")
    queue = context.Queue()
    for arena in held[-2:]:
        child = context.Process(target=mapped, args=(arena.handle, arena.size, queue))
        child.start()
        rows.extend(queue.get())
        child.join()
    for arena in held:
        arena.free()
    for kind in SHAPES:
        rows.append(measure("own buffers again", kind, own(kind), read))
    print(
        json.dumps({"device": torch.cuda.get_device_name(), "calls": CALLS, "rows": rows}, indent=1)
    )


if __name__ == "__main__":
    main()
