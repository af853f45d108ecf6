"""Where the cases' seconds went, from the rows' ``breakdown`` (judge/stopwatch.py).

    python scripts/case_breakdown.py RESULTS.jsonl [...] [--by-definition]

Prints the seconds summed over all cases per step (referee, inputs, reference, worker,
call, device_load, sizing, setup, refresh, samples, compare, checks, other) with their
share, and with --by-definition the same per definition. Rows written before the
breakdown existed are counted apart. Then what an audit must not pass over: the timing
methods a passed case could not time (a graph that could not be captured: its row passes
with the method's error, and a summary's geometric mean mixes that case's other times in),
the late samples (``late`` in a phase), the workers ended for the device memory they
kept between cases (``retired``), and how far the graph's calls a sample moved between
cases of one shape (a sample sized by the memory left rather than by time moves them: in
the H200 audit at e83ee6e one dense attention shape got 1,594, 1,165 and 807).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from inference_kernels.report.rows import results_text
from inference_kernels.schema import METHODS

STEPS = (
    "referee",
    "inputs",
    "prefetch_wait",
    "least_work",
    "reference",
    "worker",
    "call",
    "call_check",
    "device_load",
    "sizing",
    "setup",
    "refresh",
    "samples",
    "clocks",
    "keep",
    "compare",
    "checks",
    "fresh",
    "end",
    "freeze",
)


def table(totals: dict[str, float], cases: int) -> str:
    whole = sum(totals.values()) or 1.0
    steps = [*STEPS, *sorted(set(totals) - set(STEPS) - {"other"}), "other"]
    lines = [f"{'step':12s} {'seconds':>10s} {'share':>7s} {'per case':>9s}"]
    for step in steps:
        value = totals.get(step, 0.0)
        lines.append(f"{step:12s} {value:10.1f} {value / whole:7.1%} {value / max(cases, 1):9.3f}")
    lines.append(f"{'total':12s} {whole:10.1f} {1:7.0%} {whole / max(cases, 1):9.3f}")
    return "\n".join(lines)


def steadiness(calls: dict[tuple[str, str], list[int]]) -> str:
    """How far the graph's calls a sample moved between cases of one shape: the shapes
    timed more than once, and the largest spread (most over fewest) among them."""
    repeated = {key: found for key, found in calls.items() if len(found) > 1}
    if not repeated:
        return "graph calls a sample: no shape timed twice"
    key, found = max(repeated.items(), key=lambda item: max(item[1]) / min(item[1]))
    moved = sum(max(found) > min(found) * 1.1 for found in repeated.values())
    return (
        f"graph calls a sample: {len(repeated)} shapes timed more than once, {moved} of them "
        f"over 10% apart; the widest, {key[0]} {key[1]}: {min(found)} to {max(found)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--by-definition", action="store_true")
    options = parser.parse_args()
    totals: dict[str, float] = defaultdict(float)
    by_definition: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counted: dict[str, int] = defaultdict(int)
    cases = without = 0
    untimed: dict[str, list[str]] = defaultdict(list)  # method -> its errors
    late = late_rows = 0
    retired: list[str] = []  # rows whose worker was ended for the device memory it kept
    # (definition, axes) -> the graph's calls a sample in each of its cases
    calls: dict[tuple[str, str], list[int]] = defaultdict(list)
    for path in options.results:
        for line in results_text(path).splitlines():
            row = json.loads(line)
            if row.get("type") != "case":
                continue
            if row.get("retired"):
                retired.append(f"{row['definition']} {row.get('axes')}: {row['retired']}")
            graph = (row.get("timing") or {}).get("graph") or {}
            if graph.get("calls_per_sample"):
                shape = json.dumps(row.get("axes"), sort_keys=True)
                calls[(row["definition"], shape)].append(graph["calls_per_sample"])
            for method, entry in (row.get("timing") or {}).items():
                if method not in METHODS:  # (kernel times: no method of timing)
                    continue
                if isinstance(entry, dict) and "error" in entry and row.get("status") == "passed":
                    untimed[method].append(
                        f"{row['definition']} {row.get('axes')}: {entry['error']}"
                    )
                elif isinstance(entry, dict) and entry.get("late"):
                    late, late_rows = late + len(entry["late"]), late_rows + 1
            if not row.get("breakdown"):
                without += 1
                continue
            cases += 1
            counted[row["definition"]] += 1
            for step, seconds in row["breakdown"].items():
                totals[step] += seconds
                by_definition[row["definition"]][step] += seconds
    print(f"{cases} cases with a breakdown" + (f", {without} without" if without else ""))
    print(table(totals, cases))
    print(f"late samples: {late} in {late_rows} phases")
    if retired:
        print(f"workers ended for the device memory they kept: {len(retired)}: {retired[0]}")
    print(steadiness(calls))
    for method, errors in sorted(untimed.items()):
        first = errors[0][:200]
        print(f"passed cases whose {method} could not be timed: {len(errors)}, the first: {first}")
    if options.by_definition:
        for name in sorted(by_definition, key=lambda n: -sum(by_definition[n].values())):
            print(f"\n{name} ({counted[name]} cases)")
            print(table(by_definition[name], counted[name]))


if __name__ == "__main__":
    main()
