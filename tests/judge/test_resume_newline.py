"""A kill that cuts a row just before its newline leaves a whole JSON row without "\\n".
It used to count as done, and the resumed run appended its first row to the same line,
so the report held a line that is not JSON. Only rows ended by their newline count now."""

import json
from pathlib import Path

from test_run_recovery import DEFINITION, SOLUTIONS, write_candidate

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge.session import Request, judge

ROOT = Path(__file__).resolve().parents[2]


def test_resume_after_a_row_cut_before_its_newline(tmp_path):
    task = json.loads((ROOT / f"dataset/tasks/{DEFINITION}.json").read_text())
    first, second = task["dev"][:2]
    candidate = write_candidate(tmp_path, "honest", (SOLUTIONS / "honest_main.py").read_text())
    report = tmp_path / "results.jsonl"

    def request(workloads, resume):
        return Request(definitions=[DEFINITION], solutions=["none"], candidates=[candidate],
                       workloads=workloads, report=report, resume=resume, validation_only=True,
                       timeout=30, cache=tmp_path / "cache")  # fmt: skip

    dataset = load_dataset(ROOT / "dataset")
    judge(dataset, request([first], resume=False))
    report.write_text(report.read_text().removesuffix("\n"))  # killed before the newline
    judge(dataset, request([first, second], resume=True))  # raised JSONDecodeError here
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    cases = [(r["solution"], r["uuid"]) for r in lines if r.get("solution") == "honest"]
    assert sorted(cases) == sorted([("honest", first), ("honest", second)])
