"""Two candidates with the same solution name (two main.py files from different folders
are both "candidate:main.py") shared one worker in a lane (``Lane.workers`` is keyed by
name), so the second was judged by running the first one's code. Rows and --resume are
keyed by name too, so the second is now refused."""

from candidates import ROOT, SOLUTIONS, candidates_request

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge.session import judge

HONEST = (SOLUTIONS / "honest.py").read_text()
ZEROS = """

def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    out, new_state = decode(q, k, v, state, A_log, a, dt_bias, b, scale)
    return torch.zeros_like(out), torch.zeros_like(new_state)
"""


def test_two_candidate_files_of_one_name_are_each_judged_on_their_own_code(tmp_path):
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    good, bad = tmp_path / "v1/main.py", tmp_path / "v2/main.py"
    good.write_text(HONEST + "\nrun = decode\n")
    bad.write_text(HONEST + ZEROS)
    request = candidates_request(tmp_path, [good, bad], validation_only=True, timeout=30)
    rows = [r for r in judge(load_dataset(ROOT / "dataset"), request) if r["type"] == "case"]
    named = sorted((r["status"], r.get("uuid") is None) for r in rows)
    # v2/main.py must not be judged as v1 (it was: one worker per name ran v1's code for
    # both); it is refused with a failed row that names it, and v1 is judged.
    assert named == [("load_failed", True), ("passed", False)]
    (refused,) = [r for r in rows if r["status"] == "load_failed"]
    assert "v2/main.py" in refused["error"] and "rename" in refused["error"]


def _impostor(tmp_path, name: str, honest: bool = True):
    """A candidate folder whose solution.json claims ``name``."""
    import json

    folder = tmp_path / name.replace(":", "_")
    folder.mkdir()
    (folder / "main.py").write_text(HONEST + ("\nrun = decode\n" if honest else ZEROS))
    solution = {
        "name": name,
        "definition": "gdn_decode_qk4_v8_d128_k_last",
        "author": "impostor",
        "spec": {
            "language": "python",
            "target_hardware": ["cpu"],
            "entry_point": "main.py::run",
            "destination_passing_style": False,
        },
        "sources": [{"path": "main.py"}],
    }
    (folder / "solution.json").write_text(json.dumps(solution))
    return folder


def test_a_candidate_named_like_a_dataset_solution_writes_no_row_under_that_name(tmp_path):
    # Red team, ninth session: under --only-candidates (the baseline not selected) a candidate
    # that called itself the baseline was judged and signed as the baseline, and its rows,
    # combined with an honest report, replaced the baseline's times; beside the baseline its
    # refusal was a load_failed row under the baseline's name.
    baseline = "torch_gdn_decode_qk4_v8_d128_k_last"
    for selected in ([], [baseline]):
        folder = tmp_path / f"run{len(selected)}"
        folder.mkdir()
        request = candidates_request(
            folder, [_impostor(folder, baseline, honest=False)], validation_only=True
        )
        request.solutions = selected
        rows = [r for r in judge(load_dataset(ROOT / "dataset"), request) if r["type"] == "case"]
        refused = [r for r in rows if r["status"] == "load_failed"]
        assert len(refused) == 1 and "name of a dataset solution" in refused[0]["error"]
        assert refused[0]["solution"] == f"candidate:{baseline}"
        assert [r["status"] for r in rows if r["solution"] == baseline] == ["passed"] * len(
            selected
        )


def test_the_command_refuses_such_a_candidate_before_any_work(tmp_path):
    from typer.testing import CliRunner

    from inference_kernels.cli import app

    folder = _impostor(tmp_path, "torch_gdn_decode_qk4_v8_d128_k_last")
    report = tmp_path / "r.jsonl"
    arguments = ["run", "-d", "gdn_decode_qk4_v8_d128_k_last", "--candidate", str(folder)]
    result = CliRunner().invoke(app, [*arguments, "--only-candidates", "--report", str(report)])
    assert result.exit_code == 2 and "is the name of a dataset solution" in result.output
    assert not report.exists()
    other = _impostor(tmp_path, "mine")
    other_definition = json_replace(other / "solution.json", "gdn_prefill_qk4_v8_d128_k_last")
    result = CliRunner().invoke(
        app, ["run", "-d", "gdn_decode_qk4_v8_d128_k_last", "--candidate", str(other_definition)]
    )
    assert result.exit_code == 2 and "is for 'gdn_prefill_qk4_v8_d128_k_last'" in result.output


def json_replace(manifest, definition: str):
    import json

    data = json.loads(manifest.read_text())
    data["definition"] = definition
    manifest.write_text(json.dumps(data))
    return manifest.parent


def test_a_report_with_a_refused_candidate_is_read_by_every_command(tmp_path):
    # Red team, ninth session: a refused candidate's row has no workload, so no uuid, and
    # summary, report, compare and preferred refused the whole report over it.
    from typer.testing import CliRunner

    from inference_kernels.cli import app

    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    good = tmp_path / "good.py"
    good.write_text(HONEST + "\nrun = decode\n")
    request = candidates_request(tmp_path, [broken, good], validation_only=True)
    rows = [r for r in judge(load_dataset(ROOT / "dataset"), request) if r["type"] == "case"]
    assert sorted(r["status"] for r in rows) == ["load_failed", "passed"]
    report = str(request.report)
    for arguments in (
        ["summary", report, "-o", str(tmp_path / "summary")],
        ["report", report, "-o", str(tmp_path / "html")],
        ["compare", report],
        ["preferred", report, "-o", str(tmp_path / "preferred.json")],
    ):
        result = CliRunner().invoke(app, arguments)
        assert result.exit_code == 0, (arguments, result.output)
