"""Does a change of the SM clock stall the device past the referee's idle probe?

After each timed sample the referee times a one-element kernel (``Sampler._probe``): if
the device is still busy over ``sampling.PROBE_LIMIT`` (2 ms), the worker left work
running and the case is ``timing_suspect``. In the H200 audit at c839524 an honest
baseline tripped it once, on the sample where the SM clock went from 1,740 to 1,965 MHz
(docs/measurements/case-breakdown.md). This provokes such changes: rounds of a heavy
bf16 load (the referee's background load, ``judge/busy.py``), for ``--load`` seconds, each
followed by ``--after`` seconds of short kernels with the probe after every burst, as a
case's samples are. It records each probe's wait and the SM clock (NVML) around it, and
prints, as JSON: the probes over the limit, and the largest waits where the clock read
before and after a probe differ against where they agree.

    PYTHONPATH=src python3 benchmarks/clock_stall.py [--rounds 12] [--load 1.0] [--after 1.0]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from inference_kernels.judge.busy import products
from inference_kernels.judge.clocks import reader
from inference_kernels.judge.sampling import PROBE_LIMIT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--load", type=float, default=1.0, help="seconds of heavy load")
    parser.add_argument("--after", type=float, default=1.0, help="seconds of probed bursts")
    options = parser.parse_args()
    device = torch.device("cuda", 0)
    read = reader(device)
    if read is None:
        raise SystemExit("no NVML reader on this device")
    heavy = products(device)()
    probe = torch.zeros(1, device=device)
    burst = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    events = []  # (wait s, clock before MHz, clock after MHz, seconds since the load)
    for _ in range(options.rounds):
        began = time.monotonic()
        while time.monotonic() - began < options.load:
            heavy()
        stopped = time.monotonic()
        while time.monotonic() - stopped < options.after:
            for _ in range(20):  # a short sample's kernels
                torch.mm(burst, burst)
            torch.cuda.synchronize(device)
            before = read().sm_mhz
            start = time.perf_counter()
            probe.add_(1)
            torch.cuda.synchronize(device)
            wait = time.perf_counter() - start
            events.append((wait, before, read().sm_mhz, time.monotonic() - stopped))
    changed = [e for e in events if e[1] != e[2]]
    steady = [e for e in events if e[1] == e[2]]

    def top(rows):
        return [
            {"wait_ms": round(w * 1e3, 3), "sm_mhz": [b, a], "after_load_s": round(t, 3)}
            for w, b, a, t in sorted(rows, reverse=True)[:5]
        ]

    print(
        json.dumps(
            {
                "device": torch.cuda.get_device_name(device),
                "probes": len(events),
                "over_limit": {
                    "count": sum(e[0] > PROBE_LIMIT for e in events),
                    "largest": top([e for e in events if e[0] > PROBE_LIMIT]),
                },
                "clock_changed": {"count": len(changed), "largest": top(changed)},
                "clock_steady": {"count": len(steady), "largest": top(steady)},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
