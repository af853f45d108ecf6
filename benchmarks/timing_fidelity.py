"""Does the sandbox change the times the judge reports? And do they agree with triton?

Judges the plain-PyTorch baseline on two of the dataset's compute-bound workloads, a bf16
GEMM (``dense_gemm_bf16_nt_n12288_k4096``, M=4096) and dense attention
(``noncausal_dense_attention_h32_d128``, B=1, Nq=Nk=2560), through the whole judge
(referee, worker, fresh inputs, outside check), RUNS times each as copies of the
solution judged one after another by one referee: once with every worker in the
bubblewrap sandbox and once with ``--no-sandbox``. Then times the same calls with
triton's ``do_bench_cudagraph``. Prints JSON: per workload and mode the graph (and eager)
medians of each run, their median and spread, the sandboxed/unsandboxed ratio, and the
worker-reported against outside-seen times, each run's SM clock, power, input sets and
heaviest kernel (CUPTI, ``--kernel-times``). Run on a CUDA machine:

    PYTHONPATH=src python3 benchmarks/timing_fidelity.py
"""

import json
import statistics
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge.session import Request, judge

ROOT = Path(__file__).resolve().parents[1]
RUNS = 5
SHAPES = {
    "gemm_bf16_m4096_n12288_k4096": ("dense_gemm_bf16_nt_n12288_k4096", {"M": 4096}),
    "sdpa_b1_h32_n2560_d128": (
        "noncausal_dense_attention_h32_d128",
        {"B": 1, "Nq": 2560, "Nk": 2560},
    ),
}


def _uuid(dataset, definition: str, axes: dict) -> str:
    return next(w.uuid for w in dataset.workloads[definition] if w.axes == axes)


def judged(sandboxed: bool) -> dict[str, list[dict]]:
    """Rows of RUNS copies of each baseline, by shape."""
    dataset = load_dataset(ROOT / "dataset")
    names, uuids = [], []
    for definition, axes in SHAPES.values():
        baseline = dataset.solutions[dataset.tasks[definition].baseline]
        for run in range(RUNS):
            copy = baseline.model_copy(update={"name": f"{baseline.name}#{run}"})
            dataset.solutions[copy.name] = copy
            names.append(copy.name)
        uuids.append(_uuid(dataset, definition, axes))
    folder = Path(tempfile.mkdtemp(prefix="fidelity-"))
    request = Request(
        definitions=[definition for definition, _ in SHAPES.values()],
        solutions=names,
        suite="all",
        workloads=uuids,
        devices=["cuda:0"],
        report=folder / "results.jsonl",
        cache=folder / "cache",
        sandbox=sandboxed,
        kernel_times=True,
    )
    rows = [row for row in judge(dataset, request) if row.get("type") == "case"]
    return {
        shape: [row for row in rows if row["definition"] == definition]
        for shape, (definition, _) in SHAPES.items()
    }


def figures(rows: list[dict], method: str) -> dict:
    timed = [row["timing"][method] for row in rows if method in row["timing"]]
    medians = [entry["median_us"] for entry in timed]
    outside = [entry["outside"]["median_us"] for entry in timed]
    return {
        "statuses": sorted({row["status"] for row in rows}),
        "runs_us": [round(m, 2) for m in medians],
        "median_us": round(statistics.median(medians), 2),
        "spread": round(max(medians) / min(medians) - 1, 4),
        "outside_median_us": round(statistics.median(outside), 2),
        "sm_mhz": [(entry.get("clocks") or {}).get("median_sm_mhz") for entry in timed],
        "power_w": [(entry.get("clocks") or {}).get("median_power_w") for entry in timed],
        "kernels": [_heaviest(row) for row in rows if method in row["timing"]],
        "sets": [
            row["timing"].get("sets", {}).get("count") for row in rows if method in row["timing"]
        ],
    }


def _heaviest(row: dict) -> str | None:
    """The name of the case's heaviest kernel (which one a library chose), if profiled."""
    top = (row["timing"].get("kernels") or {}).get("top") or {}
    return next(iter(top), None)


def triton_us(shape: str) -> float:
    from triton.testing import do_bench_cudagraph

    g = torch.Generator(device="cuda").manual_seed(0)
    if shape.startswith("gemm"):
        a = torch.randn(4096, 4096, device="cuda", generator=g).bfloat16()
        w = (torch.randn(12288, 4096, device="cuda", generator=g) * 0.02).bfloat16()
        call = lambda: F.linear(a, w)  # noqa: E731
    else:
        size = (1, 32, 2560, 128)
        q, k, v = (torch.randn(*size, device="cuda", generator=g).bfloat16() for _ in "qkv")
        call = lambda: F.scaled_dot_product_attention(q, k, v)  # noqa: E731
    return statistics.median(do_bench_cudagraph(call) * 1000 for _ in range(RUNS))


def main() -> None:
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "runs": RUNS}
    modes = {"sandboxed": judged(True), "unsandboxed": judged(False)}
    for shape in SHAPES:
        entry = {}
        for mode, rows in modes.items():
            entry[mode] = {method: figures(rows[shape], method) for method in ("graph", "eager")}
        ours = entry["sandboxed"]["graph"]["median_us"]
        entry["graph_sandboxed_over_unsandboxed"] = round(
            ours / entry["unsandboxed"]["graph"]["median_us"], 4
        )
        try:
            theirs = round(triton_us(shape), 2)
            entry["triton_do_bench_cudagraph_us"] = theirs
            entry["graph_sandboxed_over_triton"] = round(ours / theirs, 4)
        except ImportError:
            pass
        report[shape] = entry
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
