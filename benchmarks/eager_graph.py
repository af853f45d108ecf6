"""Do eager calls and graph replays of one case agree where launch cost is nil? (issue 11)

Every method of a case is sampled in the same device state (interleaved rounds), so eager
over graph should be launch cost and nothing else: 1.00 +- 0.02 for a call whose work is
one or two kernels of at least 100 us. For each GEMM and attention definition this judges
every solution of the dataset (the task baseline and our own kernels) on its largest dev
workload that is not too slow to judge in a device call (the baseline's graph median in an
earlier dev run, ``--runs``, at most ``--cap-ms``; the smallest dev workload when none is),
in one regime, with the kernels' own durations (``run --kernel-times``: kernels per call),
and prints per case eager, prepared and graph medians, eager/graph, kernels per call and
whether the case meets the condition (one or two kernels, graph >= 100 us). Stand-in
inputs, as every bundled workload without tensors.

    PYTHONPATH=src python3 benchmarks/eager_graph.py [--regime sustained] > eager-graph.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from inference_kernels.report.rows import results_text

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "docs/measurements/regimes/h200x2-dev-0d7e5f7.jsonl.gz"
FAMILIES = (  # the op_type folders of GEMM and attention definitions
    "gemm",
    "grouped_gemm",
    "moe_router",
    "dense_attention",
    "block_causal_attention",
    "sparse_mla",
    "mixed_mla",
    "neighborhood_attention",
    "qsa_attention",
    "qsa_index",
)
CONDITION_US = 100.0  # a call of at least this long ...
CONDITION_KERNELS = 2  # ... and at most this many kernels: launch cost well below 1%
TARGET = 0.02


def earlier_graph_us(path: Path) -> dict[str, float]:
    """Each workload's baseline graph median in an earlier run (uuid -> us)."""
    found = {}
    for line in results_text(path).splitlines():
        row = json.loads(line)
        graph = ((row.get("timing") or {}).get("graph") or {}).get("median_us")
        if row.get("type") == "case" and graph:
            found[row["uuid"]] = graph
    return found


def picks(dataset, earlier: dict[str, float], cap_us: float, minimum_us: float) -> dict:
    """definition -> (uuid, its earlier baseline graph us, whether the baseline is judged)."""
    chosen = {}
    for name, definition in sorted(dataset.definitions.items()):
        if definition.op_type not in FAMILIES:
            continue
        timed = [(earlier[u], u) for u in dataset.tasks[name].dev if u in earlier]
        if not timed or max(timed)[0] < minimum_us:
            continue  # no call of this definition is long enough for the condition
        inside = [t for t in timed if t[0] <= cap_us]
        us, uuid = max(inside) if inside else min(timed)
        chosen[name] = (uuid, us, us <= cap_us)
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regime", default="sustained", choices=["sustained", "burst"])
    parser.add_argument("--runs", type=Path, default=RUNS, help="an earlier dev run's rows")
    parser.add_argument("--cap-ms", type=float, default=30.0)
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per answer")
    parser.add_argument("--list", action="store_true", help="print the picks and stop")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("-d", dest="only", action="append", help="only these definitions")
    parser.add_argument("-s", dest="solutions", action="append", help="only these solutions")
    parser.add_argument("--report", type=Path, help="keep the rows here (default: a temp dir)")
    parser.add_argument("--summarize", type=Path, help="judge nothing: summarize these rows")
    options = parser.parse_args()
    from inference_kernels.dataset.layout import load_dataset
    from inference_kernels.judge.session import Request, judge

    dataset = load_dataset(ROOT / "dataset")
    chosen = picks(dataset, earlier_graph_us(options.runs), options.cap_ms * 1e3, CONDITION_US)
    chosen = {d: pick for d, pick in chosen.items() if not options.only or d in options.only}
    solutions = sorted(
        name
        for name, solution in dataset.solutions.items()
        if solution.definition in chosen
        and (chosen[solution.definition][2] or name != dataset.tasks[solution.definition].baseline)
        and (not options.solutions or name in options.solutions)
    )
    if options.list:
        print(json.dumps({"workloads": chosen, "solutions": solutions}, indent=1))
        return
    if options.summarize:
        rows = [json.loads(line) for line in options.summarize.read_text().splitlines()]
    else:
        folder = Path(tempfile.mkdtemp(prefix="eager-graph-"))
        rows = judge(
            dataset,
            Request(
                definitions=sorted({dataset.solutions[s].definition for s in solutions}),
                solutions=solutions,
                suite="all",
                workloads=[uuid for uuid, _, _ in chosen.values()],
                devices=[options.device],
                report=options.report or folder / "results.jsonl",
                cache=folder / "cache",
                regime=options.regime,
                kernel_times=True,
                timeout=options.timeout,
            ),
        )
    summarize(rows, options.regime)


def summarize(rows: list[dict], regime: str) -> None:
    cases, held = [], defaultdict(list)
    for row in rows:
        if row.get("type") != "case":
            continue
        timing = row.get("timing") or {}
        medians = {
            m: (timing.get(m) or {}).get("median_us") for m in ("eager", "prepared", "graph")
        }
        kernels = timing.get("kernels") or {}
        case = {
            "definition": row["definition"],
            "solution": row["solution"],
            "uuid": row["uuid"][:8],
            "axes": row.get("axes"),
            "status": row["status"],
            "message": (row.get("message") or "")[:300] or None,
            "inputs": row.get("inputs"),
            **{f"{m}_us": us for m, us in medians.items()},
            "eager_host_us": (timing.get("eager") or {}).get("host_median_us"),
            "kernels_per_call": kernels.get("launches"),
            "kernel_us": kernels.get("us"),
            "sm_mhz": ((timing.get("graph") or {}).get("clocks") or {}).get("median_sm_mhz"),
        }
        if medians["eager"] and medians["graph"]:
            ratio = medians["eager"] / medians["graph"]
            case["eager_over_graph"] = round(ratio, 4)
            launches = kernels.get("launches")
            meets = (
                launches is not None
                and launches <= CONDITION_KERNELS
                and medians["graph"] >= CONDITION_US
            )
            case["meets_condition"] = meets
            if meets:
                held["within" if abs(ratio - 1) <= TARGET else "outside"].append(
                    f"{row['solution']} {ratio:.3f}"
                )
        cases.append(case)
        print(json.dumps(case), file=sys.stderr, flush=True)
    print(json.dumps({"regime": regime, "cases": cases, "held": held}, indent=1))


if __name__ == "__main__":
    main()
