"""A kernel author's path: `new` writes a folder that `run --candidate` judges as it is;
usage errors are one line, with "did you mean", before any case runs; --json carries
them; progress off a terminal is plain lines."""

import io
import json
import shlex
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from inference_kernels.cli import app, main
from inference_kernels.cli.common import PlainProgress

ROOT = Path(__file__).resolve().parents[1]
GDN = "gdn_decode_qk4_v8_d128_k_last"
HONEST = (ROOT / "tests/exploits/solutions/honest.py").read_text()


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def judged(tmp_path, *args) -> tuple[int, list[dict]]:
    report = tmp_path / "r.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "inference_kernels.cli", "run", "-d", GDN, "--only-candidates",
         "--validation-only", "--report", report, "--overwrite", "--cache", tmp_path / "cache",
         "--timeout", "60", *args],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    rows = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    return done.returncode, [r for r in rows if r["type"] == "case"]


def test_new_writes_a_folder_that_is_judged_as_it_is_and_then_passes(tmp_path):
    folder = tmp_path / "mine"
    result = invoke("new", "-d", GDN, "-o", folder)
    assert result.exit_code == 0, result.output
    solution = json.loads((folder / "solution.json").read_text())
    assert solution["spec"]["entry_point"] == "main.py::run"
    assert solution["sources"] == [{"path": "main.py"}]  # read from the folder when judged
    main_py = (folder / "main.py").read_text()
    assert "def run(q, k, v, state, A_log, a, dt_bias, b, scale):" in main_py
    assert "state: float32[batch_size, num_v_heads, head_size, head_size]" in main_py
    assert f"--candidate {folder}" in result.output  # the line that judges it

    code, rows = judged(tmp_path, "--candidate", folder)
    assert code == 1 and [r["status"] for r in rows] != ["passed"] and rows  # a draft fails

    (folder / "honest.py").write_text(HONEST)
    (folder / "main.py").write_text("from .honest import decode as run  # noqa: F401\n")
    solution["sources"].append({"path": "honest.py"})
    (folder / "solution.json").write_text(json.dumps(solution))
    code, rows = judged(tmp_path, "--candidate", folder, "--name", "my-decode")
    assert code == 0 and {(r["solution"], r["status"]) for r in rows} == {("my-decode", "passed")}


def test_the_line_new_prints_judges_the_folder_again_after_an_edit(tmp_path):
    # It once put the report inside the candidate folder, whose files are pinned by hash for
    # the run: the second run (after an edit, as the README says) stopped at its first row.
    folder = tmp_path / "mine"
    result = invoke("new", "-d", GDN, "-o", folder, "--json")
    command = shlex.split(json.loads(result.output)["judge"])
    assert command[0] == "inference-kernels" and "--report" in command
    report = Path(command[command.index("--report") + 1])
    assert not (tmp_path / report).resolve().is_relative_to(folder.resolve())
    extra = ["--only-candidates", "--validation-only", "--cache", str(tmp_path / "cache")]
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-m", "inference_kernels.cli", *command[1:], *extra],
            capture_output=True, text=True, cwd=tmp_path, check=False,
        )  # fmt: skip
        assert "Traceback" not in done.stderr and "changed since" not in done.stderr, done.stderr
        rows = [json.loads(line) for line in (tmp_path / report).read_text().splitlines()]
        cases = [r for r in rows if r["type"] == "case"]
        assert len(cases) == 1 and cases[0]["status"] != "passed", rows  # the draft, judged
        assert done.returncode == 1, done.stderr


def test_a_report_or_cache_inside_a_candidate_folder_is_a_usage_error(tmp_path):
    folder = tmp_path / "mine"
    invoke("new", "-d", GDN, "-o", folder)
    for option in ("--report", "--cache"):
        inside = folder / ("r.jsonl" if option == "--report" else "cache")
        result = invoke("run", "-d", GDN, "--candidate", folder, option, inside)
        assert result.exit_code == 2, result.output
        assert "inside the candidate folder" in result.output
        assert not inside.exists()
    assert sorted(p.name for p in folder.iterdir()) == ["main.py", "solution.json"]


def test_new_refuses_a_folder_in_use_and_an_unknown_language(tmp_path):
    (tmp_path / "used").mkdir()
    (tmp_path / "used/keep.txt").write_text("mine")
    result = invoke("new", "-d", GDN, "-o", tmp_path / "used")
    assert result.exit_code == 2 and "not an empty folder" in result.output
    assert (tmp_path / "used/keep.txt").read_text() == "mine"
    result = invoke("new", "-d", GDN, "--language", "rust", "-o", tmp_path / "x")
    assert result.exit_code == 2 and "python, triton, cuda, cpp" in result.output


def test_unknown_names_are_usage_errors_with_close_matches(tmp_path):
    report = tmp_path / "r.jsonl"
    result = invoke("run", "-s", "torch_gdn_decode", "--report", report)
    assert result.exit_code == 2
    assert "no solution named 'torch_gdn_decode'; did you mean" in result.output
    assert "'torch_gdn_decode_qk4_v8_d128_k_last'" in result.output
    result = invoke("show", "-d", "gdn_decode_qk4")
    assert result.exit_code == 2 and f"did you mean '{GDN}'" in result.output
    result = invoke("run", "-d", GDN, "--candidate", tmp_path / "missing.py", "--report", report)
    assert result.exit_code == 2 and "missing.py: no such file or folder" in result.output
    assert not report.exists()  # refused before any case ran


def test_an_empty_or_foreign_folder_is_no_dataset(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign/notes.txt").write_text("hello")
    for folder, why in (("empty", "it is empty"), ("foreign", "has no definitions")):
        for command in (["check"], ["show"], ["run", "--report", tmp_path / "r.jsonl"]):
            result = invoke(*command, "--dataset", tmp_path / folder)
            assert result.exit_code == 2, (command, result.output)
            assert "not a dataset" in result.output and why in result.output


def test_usage_errors_are_json_with_json(capsys):
    assert main(["run", "--zzz", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)
    assert error == {"error": "No such option: --zzz", "exit_code": 2}
    assert main(["show", "-d", "gdn_decode_qk4", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)
    assert "did you mean" in error["error"] and error["exit_code"] == 2
    assert main(["show", "-d", "gdn_decode_qk4"]) == 2
    assert capsys.readouterr().out == ""  # without --json: stderr only


def test_plain_progress_prints_done_total_rate_and_eta_at_a_modest_rate():
    now = [0.0]
    out = io.StringIO()
    with PlainProgress(every=30, out=out, clock=lambda: now[0]) as progress:
        task = progress.add_task("judging", total=10)
        for step in range(10):
            now[0] += 5.0
            progress.update(task, advance=1, description=f"judging case {step}")
    lines = out.getvalue().splitlines()
    # the first case (no rate to give an ETA yet), then one line per 30 s (cases 7 at
    # 35 s), then the last
    assert lines == [
        "judging case 0: 1/10, 5.0 s each, elapsed 5 s",
        "judging case 6: 7/10, 5.0 s each, ETA 15 s, elapsed 35 s",
        "judging case 9: 10/10, 5.0 s each, elapsed 50 s",
    ]


def test_plain_progress_follows_completed_counts_as_fetch_reports_bytes():
    now = [0.0]
    out = io.StringIO()
    with PlainProgress(every=30, out=out, clock=lambda: now[0]) as progress:
        task = progress.add_task("fetch", total=None)
        now[0] = 10.0
        progress.update(task, description="blob a", completed=400, total=1000)
        now[0] = 20.0
        progress.update(task, description="blob b", completed=1000, total=1000)
    assert out.getvalue().splitlines() == [
        "blob a: 400/1000, 40/s, elapsed 10 s",
        "blob b: 1000/1000, 50/s, elapsed 20 s",
    ]


def test_plain_progress_gives_the_eta_at_the_rate_after_the_start_up():
    # an audit's first case carries the lane's start and preheat (19 s), the others 1 s
    now = [0.0]
    out = io.StringIO()
    with PlainProgress(every=30, out=out, clock=lambda: now[0]) as progress:
        task = progress.add_task("judging", total=384)
        for step in range(40):
            now[0] += 19.0 if step == 0 else 1.0
            progress.update(task, advance=1)
    assert out.getvalue().splitlines() == [
        "judging: 1/384, 19.0 s each, elapsed 19 s",
        "judging: 31/384, 1.6 s each, ETA 5 min 53 s, elapsed 49 s",  # 353 left at 1 s
        "judging: 40/384, 1.4 s each, ETA 5 min 44 s, elapsed 58 s",  # the last, at exit
    ]
