"""How far apart do separate runs of the same code come out? (issue 11's acceptance)

1. The two reference kernels (the bf16 GEMM M=4096 N=12288 K=4096 and the SDPA B=1 h=32
   N=2560 d=128), their baselines judged in RUNS separate runs (a new referee each, so
   each sustained run has its own preheat), in each regime: every run's graph median, the
   max/min over runs (target: at most 1.02) and the eager/graph ratio.
2. The dev suites of their two definitions judged twice in the sustained regime, and
   ``compare`` of the second run against the first: the verdict of every workload
   (target: no significant difference on every one).

Prints JSON. Run on a CUDA machine:

    PYTHONPATH=src python3 benchmarks/run_to_run.py [--runs 5] [--part spread|compare] \
        [--rows rows.jsonl] > r2r.json

``--rows`` keeps every judged row (each run's environment row first), for what the
figures above leave out: clocks, host time per call, samples.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROWS: Path | None = None  # --rows: every run's rows are appended here
KERNELS = {
    "gemm_m4096_n12288_k4096": ("dense_gemm_bf16_nt_n12288_k4096", {"M": 4096}),
    "sdpa_b1_h32_n2560_d128": (
        "noncausal_dense_attention_h32_d128",
        {"B": 1, "Nq": 2560, "Nk": 2560},
    ),
}


def judge_baselines(
    definitions,
    workloads,
    suite,
    regime,
    folder: Path,
    kernel_times: bool = False,
    solutions: list[str] | None = None,
) -> list[dict]:
    """The rows of the task baselines of ``definitions`` (or of ``solutions``) judged on
    one GPU in ``regime`` (also used by ncu_agreement.py, with ``kernel_times``: CUPTI
    durations in each row)."""
    from inference_kernels.dataset.layout import load_dataset
    from inference_kernels.judge.session import Request, judge

    dataset = load_dataset(ROOT / "dataset")
    request = Request(
        definitions=definitions,
        solutions=solutions or [dataset.tasks[d].baseline for d in definitions],
        suite=suite,
        workloads=workloads,
        devices=["cuda:0"],
        report=folder / "results.jsonl",
        cache=folder / "cache",
        regime=regime,
        kernel_times=kernel_times,
    )
    rows = judge(dataset, request)
    if ROWS is not None:
        with ROWS.open("a") as kept:
            kept.write((folder / "results.jsonl").read_text())
    return rows


def spread(runs: int, regime: str) -> dict:
    from inference_kernels.dataset.layout import load_dataset

    dataset = load_dataset(ROOT / "dataset")
    uuids = {
        name: next(w.uuid for w in dataset.workloads[d] if w.axes == axes)
        for name, (d, axes) in KERNELS.items()
    }
    graph = {name: [] for name in KERNELS}
    ratio = {name: [] for name in KERNELS}
    for _ in range(runs):
        folder = Path(tempfile.mkdtemp(prefix=f"r2r-{regime}-"))
        rows = judge_baselines(
            sorted({d for d, _ in KERNELS.values()}), list(uuids.values()), "all", regime, folder
        )
        for name, uuid in uuids.items():
            row = next(r for r in rows if r.get("uuid") == uuid)
            timing = row["timing"]
            graph[name].append(round(timing["graph"]["median_us"], 2))
            ratio[name].append(
                round(timing["eager"]["median_us"] / timing["graph"]["median_us"], 4)
            )
    return {
        name: {
            "graph_median_us": graph[name],
            "max_over_min": round(max(graph[name]) / min(graph[name]), 4),
            "eager_over_graph": ratio[name],
            "median_eager_over_graph": statistics.median(ratio[name]),
        }
        for name in KERNELS
    }


def same_code_compare() -> dict:
    """Two sustained dev-suite runs: ``compare``'s verdict per definition, and the same
    paired statistics per workload."""
    from inference_kernels.report.compare import comparison, speedup_entry, times_by_case

    definitions = sorted({d for d, _ in KERNELS.values()})
    folders = [Path(tempfile.mkdtemp(prefix="r2r-dev-")) for _ in range(2)]
    first, second = (judge_baselines(definitions, None, "dev", "sustained", f) for f in folders)
    old, new = times_by_case(first), times_by_case(second)
    report = {}
    for entry in comparison(second, first, {}):
        key = (entry["definition"], entry["solution"])
        workloads = {
            uuid: speedup_entry({uuid: timed}, {uuid: old[key][uuid]})
            for uuid, timed in new[key].items()
            if uuid in old[key]
        }
        report[entry["definition"]] = {
            "speedup": entry["speedup"],
            "interval": entry["interval"],
            "verdict": entry["verdict"],
            "workloads": {
                uuid[:8]: {
                    "speedup": w["speedup"],
                    "interval": w["interval"],
                    "verdict": w["verdict"],
                }
                for uuid, w in workloads.items()
            },
            "significant_workloads": sum(
                w["verdict"] in ("faster", "slower") for w in workloads.values()
            ),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--part",
        choices=["all", "spread", "compare"],
        default="all",
        help="only the spread over runs (1.) or only the same-code compare (2.)",
    )
    parser.add_argument("--rows", type=Path, help="append every judged row to this file")
    options = parser.parse_args()
    global ROWS
    ROWS = options.rows
    report = {}
    if options.part in ("all", "spread"):
        report = {regime: spread(options.runs, regime) for regime in ("burst", "sustained")}
    if options.part in ("all", "compare"):
        report["same_code_compare"] = same_code_compare()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
