"""How far the times a worker reports are from what the referee saw outside the sandbox.

For every timed method of every case in a results file: the extra time per sample (outside
median minus the worker's median times the calls per sample), and what the outside check
allowed (``judge/outside.py``: TOLERANCE, ALLOWANCE, PER_OUTPUT). Prints JSON with the
largest margins and how close each came to the limit, to set the allowances from honest
runs.

Usage: python scripts/outside_margins.py results.jsonl [...]
"""

import json
import statistics
import sys
from pathlib import Path

from inference_kernels.report.rows import results_text


def margins(paths: list[str]) -> dict:
    entries = []
    for path in paths:
        for line in results_text(Path(path)).splitlines():
            row = json.loads(line)
            if row.get("type") != "case":
                continue
            for method in ("eager", "prepared", "graph"):
                timed = row.get("timing", {}).get(method)
                if not isinstance(timed, dict) or "outside" not in timed:
                    continue
                iters = timed["calls_per_sample"]  # a method sampled again has more calls
                reported = timed["median_us"] * iters
                outside = timed["outside"]["median_us"] * iters
                allowance = timed["outside"]["resolution_us"] * iters
                limit = (1 + timed["outside"]["tolerance"]) * reported + allowance
                entries.append(
                    {
                        "case": f"{row['definition']} {row['uuid'][:8]} {method}",
                        "status": row["status"],
                        "iters": iters,
                        "extra_us_per_sample": round(outside - reported, 1),
                        "extra_us_per_call": round((outside - reported) / iters, 2),
                        "use_of_limit": round(outside / limit, 3),
                    }
                )
    extra = [e["extra_us_per_sample"] for e in entries]
    return {
        "methods_timed": len(entries),
        "extra_us_per_sample": {
            "median": statistics.median(extra) if extra else None,
            "max": max(extra) if extra else None,
        },
        "closest_to_the_limit": sorted(entries, key=lambda e: -e["use_of_limit"])[:10],
    }


if __name__ == "__main__":
    print(json.dumps(margins(sys.argv[1:]), indent=2))
