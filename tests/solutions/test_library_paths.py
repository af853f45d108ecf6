"""The library paths in dataset/solutions (issue 14): torch.compile of the task baselines
(compile_*, written by scripts/compile_candidates.py) and fla-core for the GDN
definitions (fla_*, GPU only: fla does not run in Triton's interpreter here). The compile
candidates must be what the script writes from today's baselines (a baseline changed
without them would be compared with its old self), and each passes its definition's
smallest workload on the CPU, judged in the sandbox as any solution is."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge.session import Request, judge

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "compile_candidates", ROOT / "scripts/compile_candidates.py"
)
compile_candidates = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compile_candidates)


def test_the_compile_candidates_are_todays_baselines_compiled():
    planned = compile_candidates.planned(ROOT / "dataset")
    assert len(planned) == len(compile_candidates.DEFINITIONS)
    for path, text in planned.items():
        assert path.exists() and path.read_text() == text, (
            f"{path.name}: run python scripts/compile_candidates.py"
        )
        baseline = json.loads(
            path.with_name(path.name.replace("compile_", "torch_", 1)).read_text()
        )
        sources = {s["path"]: s["content"] for s in json.loads(text)["sources"]}
        assert sources["baseline.py"] == baseline["sources"][0]["content"]


def test_each_compile_candidate_passes_its_smallest_workload_on_the_cpu(tmp_path):
    names = [f"compile_{d}" for d in compile_candidates.DEFINITIONS]
    request = Request(
        definitions=list(compile_candidates.DEFINITIONS),
        solutions=names,  # named: their target hardware is CUDA
        report=tmp_path / "results.jsonl",
        cache=tmp_path / "cache",
        validation_only=True,
        timeout=300,
    )
    rows = [r for r in judge(load_dataset(ROOT / "dataset"), request) if r["type"] == "case"]
    assert sorted(r["solution"] for r in rows) == sorted(names)
    for row in rows:
        assert row["status"] == "passed", (row["solution"], row.get("error"))
