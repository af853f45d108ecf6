"""Per-solution summaries of a run: cases, failures, typical time, speedup over the baseline."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from ..schema import Hardware
from ..stats import GPUS_DIFFER, NO_DIFFERENCE, REGIMES_DIFFER
from ..statuses import PASSED
from .compare import speedup_entry, times_by_case
from .rows import case_rows, geomean, indicative, regime
from .sol import achieved, fractions


def solution_table(
    rows: list[dict[str, Any]],
    baselines: dict[str, str],
    hardware: dict[str, Hardware] | None = None,
) -> list[dict[str, Any]]:
    """One entry per (definition, solution) in the order first seen.

    ``time_us`` is the geometric mean of the passed cases' times; ``speedup`` is the
    geometric mean, over workloads both passed, of baseline time / solution time, with its
    95% interval (``speedup_interval``) and verdict (``significance``); ``indicative`` marks
    CPU wall-clock times; ``regime`` is the device state the times were taken in;
    ``sol_fraction`` the geometric mean of the passed cases' fractions of their speed of
    light (``sol.py``, with ``hardware``) and ``bound`` what bounds most of them;
    ``tflop_s`` and ``tb_s`` the geometric means of the rates their least work achieved.
    """
    grouped: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in case_rows(rows):
        grouped[(row["definition"], row["solution"])].append(row)
    times = times_by_case(rows)
    limits = fractions(rows, hardware or {})
    rated = achieved(rows)
    table = []
    for (definition, solution), group in grouped.items():
        statuses = Counter(row["status"] for row in group)
        mine = times.get((definition, solution), {})
        base = times.get((definition, baselines.get(definition, "")), {})
        against = speedup_entry(mine, base)
        methods = {timed.method for timed in mine.values()}
        inputs = {r.get("inputs") for r in group if r.get("inputs")}
        passed = [(definition, solution, r["uuid"]) for r in group if r["status"] == PASSED]
        light = [limits[key] for key in passed if key in limits]
        bounds = Counter(entry["bound"] for entry in light)
        rates = [rated[key] for key in passed if key in rated]
        table.append(
            {
                "definition": definition,
                "solution": solution,
                "cases": len(group),
                # a solution judged in two runs has two rows a workload: rank by workloads
                "workloads": len({row["uuid"] for row in group}),
                "passed": statuses.get(PASSED, 0),
                # passed workloads whose own time the outside check cannot resolve
                # (rows.standing): timed by the referee's clock (the CPU's), or untimed
                "timed_outside": sum(timed.outside for timed in mine.values()),
                "untimed": len({key[2] for key in passed} - set(mine)),
                "failed": {k: v for k, v in statuses.items() if k != PASSED},
                "time_us": geomean([timed.us for timed in mine.values()]),
                "method": ", ".join(sorted(methods)),
                "indicative": any(indicative(m) for m in methods),
                "regime": ", ".join(sorted({regime(r) for r in group if r.get("timing")})),
                "speedup": against["speedup"],
                "speedup_interval": against["interval"],
                "significance": against["verdict"],
                "baseline": baselines.get(definition),
                "inputs": ", ".join(sorted(inputs)),
                "sol_fraction": geomean([entry["fraction"] for entry in light]),
                "bound": bounds.most_common(1)[0][0] if bounds else None,
                "tflop_s": geomean([entry["tflop_s"] for entry in rates]),
                "tb_s": geomean([entry["tb_s"] for entry in rates]),
            }
        )
    return table


def ranked(table: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per definition, the entries that may be chosen, fastest first: those with a time
    that passed every case they ran, among them those over the most workloads."""
    found = {}
    for definition in sorted({entry["definition"] for entry in table}):
        complete = [
            e
            for e in table
            if e["definition"] == definition and e["time_us"] and e["passed"] == e["cases"]
        ]
        if complete:
            widest = max(e["workloads"] for e in complete)
            widest_first = (e for e in complete if e["workloads"] == widest)
            found[definition] = sorted(widest_first, key=lambda e: e["time_us"])
    return found


def sol_label(entry: dict[str, Any]) -> str:
    """An entry's fraction of its speed of light as tables show it, e.g. "0.72 (memory)"."""
    if not entry.get("sol_fraction"):
        return "-"
    return f"{entry['sol_fraction']:.2f} ({entry['bound']})"


STAND_IN_NOTE = "STAND-IN inputs are generated, not captured."


def inputs_label(inputs: str) -> str:
    """How results show an entry's inputs: stand-ins in capitals, so none passes for
    captured data."""
    return inputs.replace("stand-in", "STAND-IN")


OUTSIDE_NOTE = (
    "Timed outside (CPU): passed, but the outside check cannot resolve the solution's own "
    "time (its resolution is over the time itself): the referee's own time of the calls "
    "stands for it, an upper bound (the judge's overhead is in it)."
)
UNTIMED_NOTE = (
    "Untimed (GPU): passed, but the outside check cannot resolve the solution's own time "
    "(too few calls fit a sample): shown in the rows, never ranked on."
)


def time_notes(entries: list[dict[str, Any]]) -> list[str]:
    """The notes for the entries' workloads timed outside or untimed, if any."""
    return [
        note
        for field, note in (("timed_outside", OUTSIDE_NOTE), ("untimed", UNTIMED_NOTE))
        if any(entry.get(field) for entry in entries)
    ]


def passed_label(entry: dict[str, Any]) -> str:
    """Passed of judged cases, and the passed workloads timed by the referee's clock or
    not at all."""
    label = f"{entry['passed']}/{entry['cases']}"
    parts = [
        f"{entry[field]} {words}"
        for field, words in (("timed_outside", "timed outside"), ("untimed", "untimed"))
        if entry.get(field)
    ]
    return label + (f" ({', '.join(parts)})" if parts else "")


INDICATIVE_NOTE = "CPU wall-clock times are indicative only: no preferred solution comes of them."
SOL_NOTE = (
    "Speed of light: the geometric mean of the passed cases' time at the device's measured "
    "peaks (the largest of compute, memory and one empty kernel) over their time, and what "
    "bounds most of them; - where the rows have no counts or the GPU no hardware table."
)
INTERVAL_NOTE = (
    "Speedups carry their 95% interval; n.s.: no significant difference (the interval "
    "reaches within the run-to-run floor of 1.0: 2% on a GPU; CPU times never differ "
    "significantly)."
)


def speedup_label(speedup: float | None, interval: list[float] | None, verdict: str | None) -> str:
    """A speedup as tables show it: with its interval, or marked n.s. when not significant."""
    if not speedup:
        return "-"
    if verdict == REGIMES_DIFFER:
        return f"{speedup:.2f}x (regimes differ)"
    if verdict == GPUS_DIFFER:
        return f"{speedup:.2f}x (GPUs differ)"
    if interval is None:
        return f"{speedup:.2f}x"
    if verdict == NO_DIFFERENCE:
        return f"{speedup:.2f}x n.s."
    return f"{speedup:.2f}x ({interval[0]:.2f}-{interval[1]:.2f})"


def method_label(entry: dict[str, Any]) -> str:
    """The clock and the regime of an entry's times, e.g. "cuda-graph, sustained"; - where
    it has no time that counts."""
    if not entry["method"]:
        return "-"
    label = ", ".join(part for part in (entry["method"], entry.get("regime")) if part)
    return label + (" (indicative)" if entry.get("indicative") else "")
