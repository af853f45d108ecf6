"""What --resume keeps. A kill that cuts a row just before its newline leaves a whole JSON
row without "\\n"; it used to count as done, and the resumed run appended its first row
to the same line. Only rows ended by their newline count now. Rows of another solution,
definition or task (by hash), or rows without timing, are refused rather than kept."""

import json

import pytest
from candidates import DEFINITION, ROOT, SOLUTIONS, candidates_request, write_candidate

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.errors import DatasetError
from inference_kernels.judge.session import judge


def test_resume_after_a_row_cut_before_its_newline(tmp_path):
    task = json.loads((ROOT / f"dataset/tasks/{DEFINITION}.json").read_text())
    first, second = task["dev"][:2]
    candidate = write_candidate(tmp_path, "honest", (SOLUTIONS / "honest_main.py").read_text())
    report = tmp_path / "results.jsonl"

    def request(workloads, resume):
        return candidates_request(
            tmp_path, [candidate], workloads=workloads, resume=resume, validation_only=True
        )

    dataset = load_dataset(ROOT / "dataset")
    judge(dataset, request([first], resume=False))
    report.write_text(report.read_text().removesuffix("\n"))  # killed before the newline
    judge(dataset, request([first, second], resume=True))  # raised JSONDecodeError here
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    cases = [(r["solution"], r["uuid"]) for r in lines if r.get("solution") == "honest"]
    assert sorted(cases) == sorted([("honest", first), ("honest", second)])


def test_resume_refuses_rows_of_another_solution_or_without_timing(tmp_path):
    task = json.loads((ROOT / f"dataset/tasks/{DEFINITION}.json").read_text())
    first, second = task["dev"][:2]
    honest = (SOLUTIONS / "honest_main.py").read_text()
    candidate = write_candidate(tmp_path, "honest", honest)
    report = tmp_path / "results.jsonl"

    def request(validation_only):
        return candidates_request(
            tmp_path, [candidate], workloads=[first, second], resume=True,
            validation_only=validation_only,
        )  # fmt: skip

    dataset = load_dataset(ROOT / "dataset")
    judge(
        dataset, candidates_request(tmp_path, [candidate], workloads=[first], validation_only=True)
    )
    with pytest.raises(DatasetError, match="judged without timing"):
        judge(dataset, request(validation_only=False))
    write_candidate(tmp_path, "honest", honest + "\n# edited\n")
    with pytest.raises(DatasetError, match="honest on .* was judged with another solution"):
        judge(dataset, request(validation_only=True))
    before = report.read_text()
    assert before.count('"type": "case"') == 1  # the refused resumes wrote nothing


def test_resume_refuses_a_report_timed_in_another_regime(tmp_path):
    candidate = write_candidate(tmp_path, "honest", (SOLUTIONS / "honest_main.py").read_text())
    dataset = load_dataset(ROOT / "dataset")
    judge(dataset, candidates_request(tmp_path, [candidate], regime="burst"))
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert rows[0]["regime"] == "burst"
    assert [r["timing"]["regime"] for r in rows if r.get("solution") == "honest"] == ["burst"]
    with pytest.raises(DatasetError) as refused:
        judge(dataset, candidates_request(tmp_path, [candidate], resume=True))
    assert refused.value.problem.field == "regime"
    assert "resume with --regime burst" in refused.value.problem.message


def test_a_key_looked_for_before_it_was_made_is_found_after(tmp_path, monkeypatch):
    # A report read before the first row was signed (no key yet) used to leave "no key"
    # cached for the process: every later resume then found its own rows unsigned.
    from inference_kernels import signing

    monkeypatch.setenv("INFERENCE_KERNELS_CONFIG", str(tmp_path / "config"))
    assert signing.key(create=False) is None
    made = signing.key()
    assert signing.key(create=False) == made
    assert signing.row_verifies(signing.sign_row({"a": 1}), signing.key(create=False))
