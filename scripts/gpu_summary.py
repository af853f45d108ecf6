"""Summarize a reference-run report; check stand-ins are identical on CPU and CUDA.

Usage: python3 scripts/gpu_summary.py dev.jsonl > summary.json
Per definition: cases, passed, and the largest case run (by input bytes) with its
reference time and peak memory. Then, for each definition's smallest workload, the
content hashes of its stand-ins materialized on the CPU and on CUDA.
"""

import json
import sys
from pathlib import Path

import torch

from inference_kernels.dataset.blobs import content_hash
from inference_kernels.dataset.layout import load_dataset
from inference_kernels.dataset.selection import select
from inference_kernels.materialize.inputs import materialize

runs = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines() if line]
summary: dict = {
    "definitions": {},
    "device": torch.cuda.get_device_name(),
    "torch": torch.__version__,
}
for run in runs:
    entry = summary["definitions"].setdefault(run["definition"], {"cases": 0, "passed": 0})
    entry["cases"] += 1
    entry["passed"] += run["status"] == "passed"
    if run["status"] != "passed":
        entry.setdefault("failures", []).append({"uuid": run["uuid"], "problems": run["problems"]})
    largest = entry.get("largest")
    if largest is None or run["input_bytes"] > largest["input_bytes"]:
        entry["largest"] = {
            key: run[key]
            for key in (
                "uuid",
                "axes",
                "inputs",
                "input_bytes",
                "materialize_seconds",
                "reference_seconds",
                "peak_memory_bytes",
            )
        }
dataset = load_dataset(Path(__file__).resolve().parents[1] / "dataset")
identical = {}
for definition, workload in select(dataset, suite="first"):
    capture = dataset.captures.get(workload.uuid)
    hashes = []
    for device in ("cpu", "cuda"):
        made = materialize(
            definition, workload, data_root=dataset.root, device=device, capture=capture
        )
        hashes.append([content_hash(v) for v in made.values if isinstance(v, torch.Tensor)])
    identical[definition.name] = hashes[0] == hashes[1]
summary["standins_identical_on_cpu_and_cuda"] = identical
summary["all_passed"] = all(r["status"] == "passed" for r in runs) and all(identical.values())
print(json.dumps(summary, indent=2))
