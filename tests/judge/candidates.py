"""Candidate solutions for the judge's tests, and a request that judges only them."""

import json
from pathlib import Path

from inference_kernels.judge.session import Request

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "tests/exploits/solutions"
DEFINITION = "gdn_decode_qk4_v8_d128_k_last"


def write_candidate(tmp_path: Path, name: str, main: str) -> Path:
    """A solution JSON of ``main`` as main.py, with the exploits' honest.py beside it."""
    candidate = tmp_path / f"{name}.json"
    candidate.write_text(
        json.dumps(
            {
                "name": name,
                "definition": DEFINITION,
                "author": "tests",
                "spec": {
                    "language": "python",
                    "target_hardware": ["cpu"],
                    "entry_point": "main.py::run",
                    "destination_passing_style": False,
                },
                "sources": [
                    {"path": "main.py", "content": main},
                    {"path": "honest.py", "content": (SOLUTIONS / "honest.py").read_text()},
                ],
            }
        )
    )
    return candidate


def candidates_request(tmp_path: Path, candidates: list[Path], **options) -> Request:
    """Judge only ``candidates`` on DEFINITION (first suite unless told), reporting to
    tmp_path/results.jsonl."""
    return Request(
        definitions=[DEFINITION],
        solutions=[],
        candidates=candidates,
        report=tmp_path / "results.jsonl",
        cache=tmp_path / "cache",
        **{"timeout": 30, **options},
    )


def prepared_referee(tmp_path: Path, methods: list[str]):
    """A CPU referee in this process, with DEFINITION's smallest workload prepared for its
    baseline: (the referee, the baseline's judge message). Close the referee after use."""
    from inference_kernels.dataset.layout import load_dataset
    from inference_kernels.judge.referee import Referee

    dataset = load_dataset(ROOT / "dataset")
    task = dataset.tasks[DEFINITION]
    solution = dataset.solutions[task.baseline]
    workload = min(dataset.workloads[DEFINITION], key=lambda w: sum(w.axes.values()))
    options = {
        "folder": str(tmp_path),
        "cache": str(tmp_path / "cache"),
        "sandbox": None,
        "timeout": 60,
        "lane": "cpu",
        "validation_only": False,
        "regime": "sustained",
        "methods": methods,
    }
    referee = Referee("cpu", options)
    prepared = referee.prepare(
        {
            "definition": dataset.definitions[DEFINITION].model_dump_json(),
            "workload": workload.model_dump(mode="json"),
            "capture": None,
            "data_root": str(ROOT / "dataset"),
            "roofline": None,
            "tolerance": task.tolerance.model_dump(),
            "timing": task.timing.model_dump(),
            "solutions": [solution.name],
        }
    )
    assert prepared["ok"], prepared
    return referee, {"solution": solution.model_dump_json()}
