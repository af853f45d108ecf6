"""Do the judge's times agree with the hardware's? The judge against Nsight Compute.

For each kernel below, the dataset's baseline is judged in both regimes (``--regime
burst`` and ``sustained``, the whole judge: sandbox, fresh inputs, outside check), and the
same baseline on the same workload runs under ncu (``--clock-control none``, kernels
bracketed by cudaProfilerStart/Stop), whose ``gpu__time_duration`` summed over a call's
kernels is the truth for the burst regime: ncu times kernels one at a time near boost
clock. Each side's SM clock is recorded (NVML, right after).

ncu runs twice. The judge never times a call on inputs that sit in L2: every timed call
reads its own input set, all of them freshly written before the sample (more than L2
holds), so the like-for-like truth is ncu with its caches flushed before each kernel
(``--cache-control all``, ``ncu``). ncu on the same inputs call after call
(``--cache-control none``, ``ncu_warm``, the mode of the issue's own measurement) shows
how much of a kernel's time is its reads from HBM. Printed as JSON:

- ``ncu``, ``ncu_warm``: kernel time per call, kernels per call and their names;
- ``plain``: the baseline timed in this process without the judge (``plain``'s doc);
- ``burst``: the judge's graph median, its ratio to each ncu time, each side's SM clock;
  and the judge's CUPTI kernel durations (``run --kernel-times``: ``timing.kernels``,
  in the burst regime each call alone after the device rested ``kernel_rest_ms``) with
  their ratios to each ncu time (``kernel_over_ncu``, ``kernel_over_ncu_warm``): like for
  like with ncu, no gap between kernels;
- ``sustained``: the judge's graph median, its SM clock and power, and the ratio to the
  burst time of the same kernel.

A call of several kernels is no like-for-like case: ncu flushes L2 before each kernel
(its intermediates come back from HBM) and serializes them, while a graph replay
overlaps one kernel's tail with the next launch. Those ratios show that cost.
Run on a CUDA machine with ncu on the PATH:

    PYTHONPATH=src python3 benchmarks/ncu_agreement.py [--calls 20] > agreement.json
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# name -> (definition, axes; None: the first dev workload), what it stands for; the task
# baseline is judged unless SOLUTIONS names another solution of the definition
KERNELS = {
    "gemm_m4096_n12288_k4096": ("dense_gemm_bf16_nt_n12288_k4096", {"M": 4096}, "compute-bound"),
    "sdpa_b1_h32_n2560_d128": (
        "noncausal_dense_attention_h32_d128",
        {"B": 1, "Nq": 2560, "Nk": 2560},
        "compute-bound attention",
    ),
    # The dataset has no copy operator; the GDN decode reads and writes its recurrent state
    # (64 x 8 x 128 x 128 fp32) and little else: bandwidth-bound.
    "gdn_decode_b64": ("gdn_decode_qk4_v8_d128_k_last", {"batch_size": 64}, "memory-bound"),
    "sdpa_h32_d64_n126_2560": (
        "noncausal_dense_attention_h32_d64",
        {"B": 1, "Nq": 126, "Nk": 2560},
        "a 20-30 us kernel",
    ),
    "sdpa_h32_d64_n1120_51": (
        "noncausal_dense_attention_h32_d64",
        {"B": 1, "Nq": 1120, "Nk": 51},
        "a 5-20 us kernel",
    ),
    "sdpa_h32_d64_n2560_126": (
        "noncausal_dense_attention_h32_d64",
        {"B": 1, "Nq": 2560, "Nk": 126},
        "a 5-20 us kernel",
    ),
    "sdpa_h32_d128_n1120_1024": (
        "noncausal_dense_attention_h32_d128",
        {"B": 1, "Nq": 1120, "Nk": 1024},
        "a 20-100 us kernel",
    ),
    "gdn_decode_b1": ("gdn_decode_qk4_v8_d128_k_last", {"batch_size": 1}, "launch-bound decode"),
    # The baselines above of GDN decode are about 23 small kernels a call, which ncu
    # serializes and flushes between: no like-for-like case. Our Triton kernel is one:
    # at batch 64 it reads and writes the 64 MB state (memory-bound, about 20 us), at
    # batch 1 a few us (launch-bound).
    "triton_gdn_decode_b64": (
        "gdn_decode_qk4_v8_d128_k_last",
        {"batch_size": 64},
        "memory-bound, one kernel",
    ),
    "triton_gdn_decode_b1": (
        "gdn_decode_qk4_v8_d128_k_last",
        {"batch_size": 1},
        "launch-bound decode, one kernel",
    ),
}
SOLUTIONS = {
    "triton_gdn_decode_b64": "triton_gdn_decode_qk4_v8_d128_k_last",
    "triton_gdn_decode_b1": "triton_gdn_decode_qk4_v8_d128_k_last",
}
UNITS = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}


def _dataset():
    from inference_kernels.dataset.layout import load_dataset

    return load_dataset(ROOT / "dataset")


def _workload(dataset, definition: str, axes: dict | None):
    if axes is None:
        first = dataset.tasks[definition].dev[0]
        return next(w for w in dataset.workloads[definition] if w.uuid == first)
    return next(w for w in dataset.workloads[definition] if w.axes == axes)


def _sm_mhz() -> int | None:
    import torch

    from inference_kernels.judge import clocks

    read = clocks.reader(torch.device("cuda:0"))
    return read().sm_mhz if read else None


def _solution_name(dataset, name: str) -> str:
    return SOLUTIONS.get(name) or dataset.tasks[KERNELS[name][0]].baseline


def judged(regime: str) -> dict[str, dict]:
    """The graph phase of each kernel's solution, judged in ``regime``."""
    from run_to_run import judge_baselines  # this folder is on sys.path when run as a script

    dataset = _dataset()
    uuids = sorted({_workload(dataset, d, axes).uuid for d, axes, _ in KERNELS.values()})
    folder = Path(tempfile.mkdtemp(prefix=f"ncu-{regime}-"))
    definitions = sorted({d for d, _, _ in KERNELS.values()})
    solutions = sorted({_solution_name(dataset, name) for name in KERNELS})
    rows = judge_baselines(
        definitions, uuids, "all", regime, folder, regime == "burst", solutions=solutions
    )
    rows = [row for row in rows if row.get("type") == "case"]
    found = {}
    for name, (definition, axes, _) in KERNELS.items():
        uuid = _workload(dataset, definition, axes).uuid
        solution = _solution_name(dataset, name)
        row = next(r for r in rows if r["uuid"] == uuid and r["solution"] == solution)
        graph = row["timing"].get("graph", {})
        found[name] = {
            "status": row["status"],
            "graph_us": graph.get("median_us"),
            "eager_us": row["timing"].get("eager", {}).get("median_us"),
            "sm_mhz": graph.get("clocks", {}).get("median_sm_mhz"),
            "power_w": graph.get("clocks", {}).get("median_power_w"),
            "stopped": graph.get("stopped"),
            "calls_per_sample": graph.get("calls_per_sample"),
            # burst only: the judge's CUPTI durations of the same kernels (timing.kernels)
            "kernel_us": (row["timing"].get("kernels") or {}).get("us"),
            "launches": (row["timing"].get("kernels") or {}).get("launches"),
            "kernel_rest_ms": (row["timing"].get("kernels") or {}).get("rest_ms"),
        }
    return found


def _baseline(name: str):
    """The ``run`` of kernel ``name``'s solution (no sandbox; a destination-passing one
    writes into outputs made once) and its workload's inputs."""
    import torch

    from inference_kernels.dataset.shapes import declared_shape
    from inference_kernels.dtypes import torch_dtype
    from inference_kernels.judge.loader import load_package, write_package
    from inference_kernels.materialize.inputs import materialize

    dataset = _dataset()
    definition_name, axes, _ = KERNELS[name]
    definition = dataset.definitions[definition_name]
    workload = _workload(dataset, definition_name, axes)
    solution = dataset.solutions[_solution_name(dataset, name)]
    made = materialize(
        definition,
        workload,
        data_root=dataset.root,
        device="cuda:0",
        capture=dataset.captures.get(workload.uuid),
    )
    package = write_package(solution, Path(tempfile.mkdtemp(prefix="ncu-")) / "package")
    run = load_package(solution, definition, package).run
    if not solution.spec.destination_passing_style:
        return run, list(made.values)
    outputs = [
        torch.empty(
            declared_shape(definition, workload, output),
            dtype=torch_dtype(spec.dtype),
            device="cuda:0",
        )
        for output, spec in definition.outputs.items()
    ]

    def call(*inputs):
        run(*inputs, *outputs)
        return outputs

    return call, list(made.values)


def plain(name: str, calls: int, judge_calls: int | None = None) -> dict:
    """The baseline timed in this process, without the judge: the median of 15 replays of a
    CUDA graph (CUDA events) of ``calls`` calls on the same inputs every call (``warm``),
    and on copies of them that together hold more than twice L2 (``rotating``). With
    ``judge_calls`` (the judge's calls per sample), graphs as long as the judge's: on the
    rotating copies (``long_rotating``) and on one copy per call, stacked as the judge
    stacks its input sets (``distinct``, what the judge does). Tells a difference of the
    judge from one of ncu, and which part of the judge's schedule makes it."""
    import statistics

    import torch
    from replays import replay_us

    run, values = _baseline(name)
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    size = sum(v.numel() * v.element_size() for v in tensors)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    copies = max(2, min(calls, -(-2 * l2 // max(size, 1))))

    def copy() -> list:
        return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]

    sets = [copy() for _ in range(copies)]
    variants = {"warm": (calls, lambda i: values), "rotating": (calls, lambda i: sets[i % copies])}
    if judge_calls:
        free = torch.cuda.mem_get_info()[0]
        many = max(2, min(judge_calls, int(0.4 * free) // max(2 * size, 1)))
        stacked = [torch.stack([v] * many) if isinstance(v, torch.Tensor) else None for v in values]
        distinct = [
            [s[i] if s is not None else v for s, v in zip(stacked, values, strict=True)]
            for i in range(many)
        ]
        variants["long_rotating"] = (many, lambda i: sets[i % copies])
        variants["distinct"] = (many, lambda i: distinct[i])
    found = {}
    for label, (count, pick) in variants.items():
        for i in range(3):
            run(*pick(i))
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        kept = []  # the judge keeps every captured call's outputs: their own memory
        with torch.cuda.graph(graph):
            for i in range(count):
                outputs = run(*pick(i))
                if label == "distinct":
                    kept.append(outputs)
        found[label + "_us"] = round(statistics.median(replay_us(graph, count, 15)), 3)
        found[label + "_calls"] = count
        del graph, kept
        torch.cuda.empty_cache()
    return found | {"copies": copies, "sm_mhz": _sm_mhz()}


def replay(name: str, calls: int) -> None:
    """Under ncu: run the baseline ``calls`` times between cudaProfilerStart and Stop."""
    import torch

    run, values = _baseline(name)
    for _ in range(10):
        run(*values)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for _ in range(calls):
        run(*values)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print("SM_MHZ", json.dumps(_sm_mhz()), flush=True)


def under_ncu(name: str, calls: int, cache: str) -> dict:
    """ncu's kernel time per call of ``name`` and the SM clock right after; ``cache`` is
    ncu's ``--cache-control`` (``all``: flushed before each kernel, ``none``: as left)."""
    command = [
        "ncu",
        "--clock-control",
        "none",
        "--cache-control",
        cache,
        "--profile-from-start",
        "off",
        "--metrics",
        "gpu__time_duration.sum",
        "--csv",
        sys.executable,
        __file__,
        "--replay",
        name,
        "--calls",
        str(calls),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ, check=False)
    if done.returncode != 0:
        return {"error": (done.stderr or done.stdout)[-500:]}
    return parse(done.stdout, calls)


def parse(stdout: str, calls: int) -> dict:
    """Kernel time per call from ncu's CSV, and the clock line ``replay`` printed."""
    total, kernels, clock, names = 0.0, 0, None, set()
    lines = stdout.splitlines()
    for line in lines:
        if line.startswith("SM_MHZ "):
            clock = json.loads(line.split(" ", 1)[1])
    table = [line for line in lines if line.startswith('"')]
    for record in csv.DictReader(io.StringIO("\n".join(table))):
        if record.get("Metric Name") == "gpu__time_duration.sum":
            value = float(record["Metric Value"].replace(",", ""))
            total += value * UNITS.get(record.get("Metric Unit", "nsecond"), 1e-3)
            kernels += 1
            names.add(record.get("Kernel Name", "?")[:120])
    if not kernels:
        return {"error": "ncu reported no kernel"}
    found = {"us": total / calls, "kernels_per_call": kernels / calls, "sm_mhz": clock}
    return found | {"kernels": sorted(names)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20, help="calls profiled per kernel")
    parser.add_argument("--replay", choices=list(KERNELS), help=argparse.SUPPRESS)
    parser.add_argument("--kernels", help="comma-separated names of KERNELS (default: all)")
    parser.add_argument("--burst-only", action="store_true", help="skip the sustained regime")
    parser.add_argument("--rows", type=Path, help="append the judged rows to this file")
    options = parser.parse_args()
    if options.replay:
        replay(options.replay, options.calls)
        return
    import run_to_run
    import torch

    run_to_run.ROWS = options.rows
    if options.kernels:
        for name in set(KERNELS) - set(options.kernels.split(",")):
            del KERNELS[name]
    burst = judged("burst")
    sustained = burst if options.burst_only else judged("sustained")
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "kernels": {}}
    for name, (definition, axes, role) in KERNELS.items():
        truth = under_ncu(name, options.calls, "all")
        warm = under_ncu(name, options.calls, "none")
        ours, busy = burst[name], sustained[name]
        entry = {"definition": definition, "axes": axes, "role": role}
        entry["solution"] = SOLUTIONS.get(name, "baseline")
        try:
            alone = plain(name, options.calls, ours.get("calls_per_sample"))
        except Exception as error:  # a baseline that cannot be captured here: say so, go on
            alone = {"error": f"{type(error).__name__}: {error}"[:300]}
        entry |= {"ncu": truth, "ncu_warm": warm, "plain": alone}
        entry["burst"] = dict(ours)
        for key, ncu in (("over_ncu", truth), ("over_ncu_warm", warm)):
            if ours["graph_us"] and ncu.get("us"):
                entry["burst"][key] = round(ours["graph_us"] / ncu["us"], 4)
            if ours.get("kernel_us") and ncu.get("us"):
                entry["burst"]["kernel_" + key] = round(ours["kernel_us"] / ncu["us"], 4)
        entry["sustained"] = dict(busy)
        if busy["graph_us"] and ours["graph_us"]:
            entry["sustained"]["over_burst"] = round(busy["graph_us"] / ours["graph_us"], 4)
        report["kernels"][name] = entry
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
