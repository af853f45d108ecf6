"""Does a solution's time depend on how many input sets its worker gets?

Judges ``timing_fidelity.py``'s baselines (the SDPA, or both shapes) as COPIES solutions in
one job, with the worker's sets cap set by ``INFERENCE_KERNELS_SETS_CAP_BYTES`` (GiB here),
one configuration after another, and prints one JSON line per case: its input sets, calls
per sample, graph and eager medians, CUPTI kernel time and the SM clock. In the fifteenth
session this found that 16 or 43 sets made the SDPA's kernel 21% slower than 91 or more,
one worker as with five (docs/measurements/h200-timing-fidelity.md).

    PYTHONPATH=src python3 benchmarks/sets_probe.py sdpa:1 sdpa:1:1.6 sdpa:5 both:5:16
    (each argument SHAPES:COPIES[:CAP_GIB]; SHAPES sdpa or both; no cap: the judge's own)
"""

from __future__ import annotations

import json
import os
import sys
import time

import timing_fidelity as fidelity

CAP = "INFERENCE_KERNELS_SETS_CAP_BYTES"


def _line(label: str, shape: str, row: dict) -> dict:
    timed = row.get("timing") or {}
    if "graph" not in timed:
        return {"config": label, "shape": shape, "status": row["status"], "error": row.get("error")}
    graph = timed["graph"]
    return {
        "config": label,
        "shape": shape,
        "solution": row["solution"],
        "status": row["status"],
        "sets": (timed.get("sets") or {}).get("count"),
        "calls_per_sample": graph.get("calls_per_sample"),
        "graph_us": round(graph["median_us"], 2),
        "eager_us": round(timed["eager"]["median_us"], 2),
        "kernel_us": round((timed.get("kernels") or {}).get("us", 0.0), 2),
        "sm_mhz": (graph.get("clocks") or {}).get("median_sm_mhz"),
    }


def main() -> None:
    every = dict(fidelity.SHAPES)
    sdpa = [name for name in every if name.startswith("sdpa")]
    for label in sys.argv[1:] or ["sdpa:1", "sdpa:1:1.6"]:
        shapes, copies, *cap = label.split(":")
        os.environ.pop(CAP, None)
        if cap:
            os.environ[CAP] = str(int(float(cap[0]) * 2**30))
        fidelity.RUNS = int(copies)
        fidelity.SHAPES = {s: every[s] for s in (sdpa if shapes == "sdpa" else every)}
        began = time.monotonic()
        for shape, rows in fidelity.judged(True).items():
            for row in rows:
                print(json.dumps(_line(label, shape, row)), flush=True)
        print(f"# {label}: {time.monotonic() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()
