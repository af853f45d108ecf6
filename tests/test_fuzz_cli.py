"""Every command, driven with bad paths and bad values: each gives a clear error and a
non-zero exit code, never a traceback, and none of them starts the work it was asked
for. Every registered command must appear here (the last test checks)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from inference_kernels.cli import app

GDN = "gdn_decode_qk4_v8_d128_k_last"


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fuzz")
    (root / "dir").mkdir()
    (root / "file.txt").write_text("a file")
    (root / "empty.jsonl").write_text("")
    (root / "garbage.jsonl").write_bytes(b"\x00\xff\xfe garbage \x80")
    (root / "truncated.jsonl").write_text('{"type": "case", "definition": ')
    (root / "foreign.jsonl").write_text('{"hello": 1}\n[1, 2]\n')
    return {
        "MISSING": root / "missing",
        "DIR": root / "dir",
        "FILE": root / "file.txt",
        "UNDER_FILE": root / "file.txt" / "x.jsonl",
        "PROC": Path("/proc/nonexistent/x.jsonl"),
        "EMPTY": root / "empty.jsonl",
        "GARBAGE": root / "garbage.jsonl",
        "TRUNCATED": root / "truncated.jsonl",
        "FOREIGN": root / "foreign.jsonl",
    }


R = ["--report", "OUT", "--overwrite"]  # a valid report for run, so only the bad part fails
CASES = {
    "check": [
        ["--dataset", "MISSING"],
        ["--dataset", "DIR"],
        ["--dataset", "FILE"],
        ["--data-root", "MISSING"],
    ],
    "show": [["nonsense"], ["-d", "nonsense"], ["--dataset", "DIR"], ["workloads", "-d", ""]],
    "materialize": [
        ["-d", "nonsense"],
        ["--suite", "most"],
        ["-w", "not-a-uuid"],
        ["-d", GDN, "-o", "UNDER_FILE"],
        ["-d", GDN, "-o", "PROC"],
        ["-d", GDN, "--device", "tpu"],
    ],
    "reference": [
        ["-d", "nonsense"],
        ["-d", GDN, "--report", "DIR"],
        ["-d", GDN, "--report", "UNDER_FILE"],
        ["-d", GDN, "--device", "tpu"],
        ["--suite", ""],
    ],
    "run": [
        ["--report", "DIR"],
        ["--report", "UNDER_FILE"],
        ["--report", "PROC"],
        ["--device", "tpu", *R],
        ["--regime", "hot", *R],
        ["--suite", "most", *R],
        ["-s", "nonsense", *R],
        ["-d", "nonsense", *R],
        ["-w", "not-a-uuid", *R],
        ["-d", GDN, "--candidate", "MISSING", *R],
        ["--candidate", "FILE", *R],
        ["-d", GDN, "--name", "x", *R],
        ["--only-candidates", *R],
        ["--timeout", "soon", *R],
        ["--timeout", "-1", *R],
        ["--dataset", "DIR", *R],
        ["--device", "cuda", *R],
        ["--ray", "auto", "--gpus", "0", *R],
    ],
    "compare": [["MISSING"], ["DIR"], ["EMPTY"], ["GARBAGE"], ["TRUNCATED"], ["FOREIGN"], []],
    "summary": [["MISSING"], ["GARBAGE"], ["FOREIGN"], ["EMPTY", "-o", "UNDER_FILE"]],
    "preferred": [["MISSING"], ["TRUNCATED"], ["EMPTY", "-o", "DIR"], ["EMPTY", "-o", "PROC"]],
    "replay": [["-d", "nonsense"], ["--report", "DIR"], ["--device", "tpu"]],
    "import": [["MISSING", "--into", "DIR"], ["DIR", "--into", "MISSING"], ["FILE"]],
    "new": [
        ["-d", "nonsense"],
        ["-d", GDN, "--language", "rust"],
        ["-d", GDN, "-o", "UNDER_FILE"],
        ["-d", GDN, "-o", "FILE"],
    ],
    "capture": [["minilm", "--device", "tpu"], ["minilm", "-o", "UNDER_FILE"], ["nonsense"]],
    "fetch": [["-d", "nonsense", "--endpoint", "http://127.0.0.1:9"], ["--into", "UNDER_FILE"]],
    "report": [["MISSING"], ["GARBAGE", "-o", "DIR"], ["EMPTY", "-o", "UNDER_FILE"]],
}


def _cases():
    for command, argument_lists in CASES.items():
        for arguments in argument_lists:
            for as_json in (False, True):
                yield pytest.param(
                    command, arguments, as_json, id=f"{command}-{arguments}-{as_json}"
                )


@pytest.mark.parametrize(("command", "arguments", "as_json"), list(_cases()))
def test_bad_input_gives_one_clear_error(places, tmp_path, command, arguments, as_json):
    places = {**places, "OUT": tmp_path / "out.jsonl"}
    args = [command, *(str(places.get(a, a)) for a in arguments)] + (["--json"] if as_json else [])
    result = CliRunner().invoke(app, args, terminal_width=200)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{args}: {type(result.exception).__name__}: {result.exception}"
    )
    assert "Traceback" not in result.output, result.output
    assert result.exit_code in (1, 2), (result.exit_code, result.output)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines, f"{args}: no message"
    if as_json and lines[-1].startswith("{"):
        assert json.loads(lines[-1])["error"]
    else:
        assert any(word in result.output.lower() for word in ("error", "no such", "usage")), (
            result.output
        )
    assert not places["OUT"].exists() or not places["OUT"].read_text(), "work was started"


def test_every_command_is_fuzzed():
    import typer.main

    group = typer.main.get_command(app)
    assert set(group.commands) == set(CASES), set(group.commands) ^ set(CASES)
