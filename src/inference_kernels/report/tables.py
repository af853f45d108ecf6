"""Per-solution summaries of a run: cases, failures, typical time, speedup over the baseline."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from .rows import case_rows, case_time, geomean


def solution_table(rows: list[dict[str, Any]], baselines: dict[str, str]) -> list[dict[str, Any]]:
    """One entry per (definition, solution) in the order first seen.

    ``time_us`` is the geometric mean of the passed cases' times; ``speedup`` is the
    geometric mean, over workloads both passed, of baseline time / solution time.
    """
    grouped: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in case_rows(rows):
        grouped[(row["definition"], row["solution"])].append(row)
    times: dict[tuple[str, str], dict[str, float]] = {
        key: {r["uuid"]: t[0] for r in group if (t := case_time(r))}
        for key, group in grouped.items()
    }
    table = []
    for (definition, solution), group in grouped.items():
        statuses = Counter(row["status"] for row in group)
        mine = times[(definition, solution)]
        base = times.get((definition, baselines.get(definition, "")), {})
        paired = [base[u] / mine[u] for u in mine if u in base]
        methods = {case_time(r)[1] for r in group if case_time(r)}
        inputs = {r.get("inputs") for r in group if r.get("inputs")}
        table.append(
            {
                "definition": definition,
                "solution": solution,
                "cases": len(group),
                "passed": statuses.get("passed", 0),
                "failed": {k: v for k, v in statuses.items() if k != "passed"},
                "time_us": geomean(list(mine.values())),
                "method": ", ".join(sorted(methods)),
                "speedup": geomean(paired),
                "baseline": baselines.get(definition),
                "inputs": ", ".join(sorted(inputs)),
            }
        )
    return table


STAND_IN_NOTE = "STAND-IN inputs are generated, not captured."


def inputs_label(inputs: str) -> str:
    """How results show an entry's inputs: stand-ins in capitals, so none passes for
    captured data."""
    return inputs.replace("stand-in", "STAND-IN")
