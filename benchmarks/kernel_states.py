"""One kernel, three states of the GPU: why ncu and a timed stream of calls disagree.

For each kernel of ``ncu_agreement.KERNELS`` (the dataset's baseline on that workload, in
this process, no judge), the device's own kernel durations (CUPTI, through torch's
profiler), per call, over calls on the same inputs:

- ``back_to_back``: one call after another, as the judge's samples run them;
- ``after_idle``: each call after a device-wide synchronize and IDLE_SECONDS of rest, as
  ncu runs kernels (one at a time, with its own work between them);
- ``after_flush``: each call after L2 was overwritten (twice its size) and a synchronize,
  ncu's default ``--cache-control all`` as far as a program can make it (ncu also flushes
  the caches a program cannot reach).

The flush's own kernels and memory sets are left out of the sums. Printed as JSON; run
on a CUDA machine:

    PYTHONPATH=src python3 benchmarks/kernel_states.py [--calls 50] > states.json
"""

from __future__ import annotations

import argparse
import json
import time

import ncu_agreement  # this folder is on sys.path when run as a script
import torch

IDLE_SECONDS = 0.002


def durations(slots, leave_out: frozenset[str] = frozenset()) -> tuple[float, float]:
    """(microseconds of kernels per call, kernels per call), leaving out the kernels named
    in ``leave_out`` (the flush's) and memory copies and sets."""
    total, count = 0, 0
    for name, ns in _device_events(slots):
        if name.startswith(("Memset", "Memcpy")) or name in leave_out:
            continue
        total += ns
        count += 1
    return round(total / 1e3 / len(slots), 3), count / len(slots)


def _device_events(slots) -> list[tuple[str, int]]:
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profiled:
        for slot in slots:
            slot()
        torch.cuda.synchronize()
    events = profiled.profiler.kineto_results.events()
    cuda = torch.autograd.DeviceType.CUDA
    return [(e.name(), e.duration_ns()) for e in events if e.device_type() == cuda]


def states(run, values, calls: int) -> dict:
    """The kernel's durations in each state (see the module's doc)."""
    flush = torch.empty(
        2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda"
    )
    flush_kernels = frozenset(name for name, _ in _device_events([lambda: flush.fill_(1)]))

    def idle():
        torch.cuda.synchronize()
        time.sleep(IDLE_SECONDS)
        return run(*values)

    def flushed():
        flush.fill_(1)
        torch.cuda.synchronize()
        return run(*values)

    for _ in range(5):
        run(*values)
    return {
        "back_to_back": durations([lambda: run(*values)] * calls),
        "after_idle": durations([idle] * calls),
        "after_flush": durations([flushed] * calls, flush_kernels),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50, help="calls per state")
    parser.add_argument("--kernels", help="comma-separated names of KERNELS (default: all)")
    options = parser.parse_args()
    names = options.kernels.split(",") if options.kernels else list(ncu_agreement.KERNELS)
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "kernels": {}}
    for name in names:
        run, values = ncu_agreement._baseline(name)
        found = states(run, values, options.calls)
        report["kernels"][name] = found | {"sm_mhz": ncu_agreement._sm_mhz()}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
