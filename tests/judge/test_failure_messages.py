"""A failure is printed once per (solution, cause), with the count of workloads it
happened on at the end; ``--json`` carries the same groups with their messages."""

import json

from candidates import DEFINITION, ROOT, write_candidate
from typer.testing import CliRunner

from inference_kernels.cli import app
from inference_kernels.report.failures import cause, grouped

SYNTAX_ERROR = "def run(q, k, v, state, A_log, a, dt_bias, b, scale)\n    return q\n"


def _run(tmp_path, candidate, *extra):
    workloads = json.loads((ROOT / f"dataset/tasks/{DEFINITION}.json").read_text())["dev"][:3]
    args = ["run", "-d", DEFINITION, "--only-candidates", "--candidate", str(candidate)]
    for uuid in workloads:
        args += ["-w", uuid]
    args += ["--validation-only", "--report", str(tmp_path / "r.jsonl")]
    args += ["--cache", str(tmp_path / "cache"), *extra]
    return CliRunner().invoke(app, args, terminal_width=300)


def test_one_message_per_cause_with_the_count_of_workloads(tmp_path):
    candidate = write_candidate(tmp_path, "broken", SYNTAX_ERROR)
    result = _run(tmp_path, candidate)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert result.output.count("SyntaxError") == 1, result.output
    assert "broken: load_failed on 2 more workload(s), same cause" in result.output
    refused = _run(tmp_path, candidate)  # the report of the first run is there
    assert refused.exit_code == 2 and "--overwrite replaces it" in " ".join(refused.output.split())
    machine = _run(tmp_path, candidate, "--json", "--overwrite")
    failures = json.loads(machine.stdout)["failures"]
    (failure,) = [f for f in failures if f["solution"] == "broken"]
    assert failure["status"] == "load_failed" and "SyntaxError" in failure["error"]
    assert len(failure["workloads"]) == 3


def test_a_cause_ignores_the_figures_that_differ_between_workloads():
    first = cause("s", "mismatch", "output y: matched 3/8 elements (37.50%); worst at [1, 2]")
    second = cause("s", "mismatch", "output y: matched 5/9 elements (55.56%); worst at [0, 7]")
    assert first == second
    assert cause("s", "mismatch", "output y: ...") != cause("s", "mismatch", "output z: ...")
    rows = [
        {"type": "case", "definition": "d", "solution": "s", "uuid": u, "status": st, "error": e}
        for u, st, e in [
            ("w1", "mismatch", "matched 3/8"),
            ("w2", "passed", None),
            ("w3", "mismatch", "matched 5/8"),
            ("w4", "timeout", "no answer in 30 s"),
        ]
    ]
    groups = grouped(rows)
    assert [(g["status"], g["workloads"]) for g in groups] == [
        ("mismatch", ["w1", "w3"]),
        ("timeout", ["w4"]),
    ]
    assert groups[0]["error"] == "matched 3/8"  # the first message, in full
