"""A quick estimate of the full audit (issue 13) from a few workloads of each definition.

    python3 scripts/audit_probe.py pick [--dataset dataset]   # prints -w UUID ... -s BASELINE ...
    python3 scripts/audit_probe.py estimate PROBE.jsonl [--dataset dataset]
    python3 scripts/audit_probe.py project PROBE.jsonl --audit AUDIT.jsonl --steps setup,compare

``pick`` names the first, middle and last workload (``--suite all`` order) of every
definition; judge them with ``run --suite all --methods graph -w ...``. ``estimate`` then
prints, per definition, its first case's time (worker start) and the mean of the others,
and the full audit's time as the sum over definitions of first + (workloads - 1) x mean,
with the steps it would spend: an estimate (sizes within a definition vary), not a
measurement.

``project`` applies the probe's change of the named steps (its seconds a case minus those of
the same workloads in an earlier audit's report, each definition's first case left out, as
a mean per definition) to that audit's measured total per definition: what the audit would
take with those steps changed and the others as they were. Also a projection.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.report.rows import results_text


def pick(dataset: Path) -> list[str]:
    """``run`` arguments: -w for the picked workloads, -s for each definition's baseline
    (the audit judges the baselines, not our other kernels)."""
    loaded = load_dataset(dataset)
    chosen = []
    for _, workloads in sorted(loaded.workloads.items()):
        count = len(workloads)
        chosen += [f"-w {workloads[i].uuid}" for i in sorted({0, count // 2, count - 1})]
    return chosen + [f"-s {task.baseline}" for _, task in sorted(loaded.tasks.items())]


def estimate(report: Path, dataset: Path) -> None:
    counts = {name: len(w) for name, w in load_dataset(dataset).workloads.items()}
    rows = [json.loads(line) for line in results_text(report).splitlines() if line.strip()]
    cases = defaultdict(list)
    for row in rows:
        if row.get("type") == "case":
            cases[row["definition"]].append(row)
    total, steps = 0.0, defaultdict(float)
    print(f"{'definition':58s} {'n':>4s} {'first':>6s} {'next':>6s} {'est. s':>7s}  not passed")
    for name in sorted(counts):
        probe = cases.get(name, [])
        if not probe:
            continue
        # The first case of a definition starts its worker (and a lane's first, the
        # referee and the preheat); the others are what the rest of its workloads cost.
        later = probe[1:] or probe
        mean = statistics.fmean(r["seconds"] for r in later)
        guess = probe[0]["seconds"] + (counts[name] - 1) * mean
        total += guess
        for row in later:
            for step, seconds in (row.get("breakdown") or {}).items():
                steps[step] += seconds * (counts[name] - 1) / len(later)
        bad = sum(row["status"] != "passed" for row in probe)
        first = probe[0]["seconds"]
        print(f"{name:58s} {counts[name]:4d} {first:6.2f} {mean:6.2f} {guess:7.0f}  {bad}")
    print(f"estimated full audit: {total:.0f} s ({total / 60:.1f} min) on one device")
    print("of which, by step (the later cases):")
    for step, seconds in sorted(steps.items(), key=lambda x: -x[1]):
        print(f"  {step:12s} {seconds:7.0f} s")
    missing = sorted(n for n in counts if not cases.get(n))
    if missing:
        print(f"not probed (counted as 0): {', '.join(missing)}")


def _cases(report: Path) -> dict[str, dict]:
    rows = (json.loads(line) for line in results_text(report).splitlines() if line.strip())
    return {row["uuid"]: row for row in rows if row.get("type") == "case"}


def project(report: Path, audit: Path, steps: list[str]) -> None:
    probe, before = _cases(report), _cases(audit)
    firsts: dict[str, str] = {}
    for uuid, row in probe.items():
        firsts.setdefault(row["definition"], uuid)
    changes = defaultdict(list)
    for uuid, row in probe.items():
        if uuid in before and uuid != firsts[row["definition"]]:
            old, new = before[uuid]["breakdown"], row["breakdown"]
            changes[row["definition"]].append(sum(new.get(s, 0) - old.get(s, 0) for s in steps))
    measured = defaultdict(list)
    for row in before.values():
        measured[row["definition"]].append(row["seconds"])
    total = after = 0.0
    print(f"{'definition':58s} {'n':>4s} {'audit s':>8s} {'projected':>9s}")
    for name, seconds in sorted(measured.items()):
        change = statistics.fmean(changes[name]) * len(seconds) if changes[name] else 0.0
        total, after = total + sum(seconds), after + sum(seconds) + change
        print(f"{name:58s} {len(seconds):4d} {sum(seconds):8.1f} {sum(seconds) + change:9.1f}")
    print(f"{len(before)} workloads: {total:.1f} s measured, {after:.1f} s with {', '.join(steps)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["pick", "estimate", "project"])
    parser.add_argument("report", nargs="?", type=Path)
    parser.add_argument("--dataset", type=Path, default=Path("dataset"))
    parser.add_argument("--audit", type=Path, help="project: the earlier audit's report")
    parser.add_argument("--steps", default="setup", help="project: steps, comma-separated")
    options = parser.parse_args()
    if options.command == "pick":
        print(" ".join(pick(options.dataset)))
    elif options.report is None:
        parser.error(f"{options.command} needs the probe's report")
    elif options.command == "project":
        if options.audit is None:
            parser.error("project needs --audit")
        project(options.report, options.audit, options.steps.split(","))
    else:
        estimate(options.report, options.dataset)


if __name__ == "__main__":
    main()
