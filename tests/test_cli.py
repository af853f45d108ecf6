import json

from typer.testing import CliRunner

from inference_kernels.cli import app

runner = CliRunner()
QSA = "qsa_index_topk_decode_qwen38_h4_d128_topk512_c4"


def invoke(*args):
    return runner.invoke(app, list(args))


def test_help_explains_every_command():
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("check", "show", "materialize", "reference"):
        assert command in result.output


def test_show_json_lists_definitions_tasks_and_workloads():
    definitions = json.loads(invoke("show", "--json").output)
    assert len(definitions) == 21 + 4  # the seed's and the MiniLM captures'
    gemm = next(d for d in definitions if d["name"] == "dense_gemm_bf16_nt_n4096_k4096")
    assert gemm["inputs"] == ["A", "W"] and gemm["workloads"] == 31
    tasks = json.loads(invoke("show", "tasks", "-d", QSA, "--json").output)
    assert tasks[0]["tolerance"]["atol"] == 0.0 and len(tasks[0]["dev"]) == 10
    workloads = json.loads(invoke("show", "workloads", "-d", QSA, "--json").output)
    assert len(workloads) == 192 and workloads[0]["inputs"] == ["random"]


def test_reference_json_reports_each_case_and_labels_stand_ins():
    result = invoke("reference", "-d", QSA, "--suite", "dev", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["failed"] == 0 and len(summary["cases"]) == 10
    case = summary["cases"][0]
    assert case["inputs"] == "stand-in" and case["generator"] == "qsa.index"
    assert case["outputs"] == [
        {"name": "block_ids", "shape": [case["axes"]["B"], 512], "dtype": "int32"}
    ]


def test_reference_table_marks_stand_ins(tmp_path):
    report = tmp_path / "runs.jsonl"
    result = invoke("reference", "-d", QSA, "--report", str(report))
    assert result.exit_code == 0
    assert "STAND-IN" in result.output and "1/1 passed" in result.output
    assert json.loads(report.read_text())["status"] == "passed"


def test_materialize_json_gives_hashes_and_origins():
    result = invoke("materialize", "-d", "gdn_decode_qk4_v8_d128_k_last", "--json")
    (row,) = json.loads(result.output)
    assert row["inputs"] == "stand-in"
    assert row["tensors"]["scale"] == {"value": 0.08838834764831843, "origin": "scalar"}
    assert len(row["tensors"]["q"]["sha256"]) == 64 and row["tensors"]["q"]["origin"] == "stand-in"


def test_bad_input_is_one_line_without_traceback():
    for args in (
        ("show", "-d", "no_such_definition"),
        ("reference", "-w", "no-such-uuid"),
        ("show", "solutions"),
    ):
        result = invoke(*args)
        assert result.exit_code == 2
        assert result.output.startswith("error:") and "Traceback" not in result.output


def test_show_one_definition_gives_what_a_solution_author_needs():
    (entry,) = json.loads(invoke("show", "-d", "gdn_decode_qk4_v8_d128_k_last", "--json").output)
    assert (
        entry["signature"]
        == "run(q, k, v, state, A_log, a, dt_bias, b, scale) -> (output, new_state)"
    )
    assert entry["inputs"]["q"] == {
        "shape": ["batch_size", "seq_len", "num_q_heads", "head_size"],
        "dtype": "bfloat16",
        "description": "Query tensor for single token decode.",
    }
    assert entry["inputs"]["scale"]["shape"] is None  # a Python scalar
    assert entry["axes"]["batch_size"]["var"] == [1, 64]
    assert entry["axes"]["head_size"]["const"] == 128
    assert "num_k_heads == num_q_heads" in entry["constraints"]
    assert entry["task"]["tolerance"] == {
        "atol": 0.01,
        "rtol": 0.01,
        "comparison": "absolute_or_relative",
    }
    text = runner.invoke(app, ["show", "-d", "gdn_decode_qk4_v8_d128_k_last"], terminal_width=200)
    assert "[batch_size, seq_len, num_q_heads, head_size]" in text.output  # not eaten as markup
    assert "var, 1..64 in the workloads" in text.output


def test_an_output_path_that_cannot_be_written_fails_before_any_work(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    results = tmp_path / "results.jsonl"
    results.write_text("")
    bad = [
        ("run", "-d", QSA, "--device", "cpu", "--report", str(tmp_path)),  # a directory
        ("run", "-d", QSA, "--device", "cpu", "--report", str(a_file / "r.jsonl")),
        ("run", "-d", QSA, "--device", "cpu", "--report", "/proc/r.jsonl"),
        ("summary", str(results), "-o", str(a_file)),
        ("preferred", str(results), "-o", str(tmp_path)),
    ]
    for args in bad:
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert result.output.startswith("error:") and "Traceback" not in result.output, args
        text = " ".join(result.output.split())  # one message (the console wraps it)
        assert any(w in text for w in ("is a directory", "is a file", "cannot be written")), text
    assert a_file.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == [
        "a_file",
        "results.jsonl",
    ]
