"""Device memory a worker holds between its cases, read through NVML by the referee.

A worker stays alive, frozen, between its cases, and keeps whatever device memory it
holds. A solution that held much of it could make the next solution's graph captures run
out of memory (its eager time then stood where a graph's should: report/compare.py no
longer pairs those) and its samples shorter (the referee sizes them by free memory). So
after each case the referee reads what the worker's processes hold, and a worker holding
more than WORKER_HELD_BYTES goes (a new one starts for its next case): a CUDA context and
torch's handles take well under a GiB, and an honest worker gives its case's memory back
when the case ends (``Worker._give_back_memory``).

Off CUDA, where NVML cannot be loaded, or where it does not say what a process holds (a
driver that hides it, processes it lists under ids of another PID namespace: then the
referee's own process, which holds a CUDA context, is not among them), nothing is read
and nothing is enforced; the referee's log says so once.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from . import clocks

WORKER_HELD_BYTES = 4 << 30

Holdings = Callable[[Callable[[int], bool]], "int | None"]


def reader(device: torch.device) -> Holdings | None:
    """A function: bytes of ``device``'s memory held now by the processes for which
    ``owns(pid)`` is true (None when NVML does not say), or None when there is nothing to
    read."""
    found = clocks.nvml(device)
    if found is None:
        return None
    pynvml, handle = found
    listed = pynvml.nvmlDeviceGetComputeRunningProcesses
    try:
        listed(handle)
    except Exception:  # a driver without the query
        return None

    referee = os.getpid()
    said = False  # that NVML lists the referee without its bytes, or not at all

    def held(owns: Callable[[int], bool]) -> int | None:
        nonlocal said
        try:
            processes = [(p.pid, p.usedGpuMemory) for p in listed(handle)]
        except Exception:  # a transient NVML error: nothing read this time
            return None
        if not total(lambda pid: pid == referee, processes):
            if not said:
                said = True
                print(
                    f"device memory: NVML gives no bytes for the referee (pid {referee}):"
                    " what a worker keeps between cases is not bounded",
                    flush=True,
                )
            return None
        return total(owns, processes)

    return held


def total(owns: Callable[[int], bool], listed: list[tuple[int, int | None]]) -> int | None:
    """Bytes held by the processes ``owns`` picks from NVML's list of (pid, bytes), or None
    where it does not say (one of them listed without its bytes)."""
    mine = [used for pid, used in listed if owns(pid)]
    if any(used is None for used in mine):
        return None
    return sum(mine)


def too_much(held: int | None) -> str | None:
    """Why a worker that holds ``held`` bytes between its cases must go, if it must."""
    if held is None or held <= WORKER_HELD_BYTES:
        return None
    return (
        f"held {held / 2**30:.1f} GiB of device memory after its case "
        f"(at most {WORKER_HELD_BYTES / 2**30:.0f} GiB): a new worker for its next case"
    )
