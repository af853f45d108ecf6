"""Every case row says where its seconds went (judge/stopwatch.py), and the steps add up
to the row's wall time."""

from candidates import DEFINITION, ROOT, SOLUTIONS, candidates_request, write_candidate

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge.session import judge

STEPS = {
    "inputs",
    "least_work",  # (the dataset has a roofline for the definition)
    "reference",
    "worker",
    "call",
    "sizing",
    "samples",
    "checks",
    "fresh",
    "end",
}
SAMPLING = {"setup", "refresh", "compare", "call_check", "clocks", "keep", "freeze"}  # apart
# and on CUDA, device_load: the load before the rounds (sustained) or the rest (burst)


def test_a_timed_case_accounts_for_its_seconds_step_by_step(tmp_path):
    honest = write_candidate(tmp_path, "honest", (SOLUTIONS / "honest_main.py").read_text())
    request = candidates_request(tmp_path, [honest], timeout=60)
    (row,) = [r for r in judge(load_dataset(ROOT / "dataset"), request) if r["type"] == "case"]
    assert row["status"] == "passed", row
    parts = row["breakdown"]
    assert set(parts) == STEPS | SAMPLING | {"referee", "other"}, parts  # a new lane
    assert abs(sum(parts.values()) - row["seconds"]) < 0.01, (parts, row["seconds"])
    assert parts["samples"] > 0 and parts["reference"] > 0 and parts["worker"] > 0
    assert parts["refresh"] > 0 and parts["compare"] > 0 and parts["setup"] >= 0  # ms on the CPU
    assert parts["other"] < 0.5 * row["seconds"], parts  # the steps are most of the case


def test_nested_spans_count_once_each():
    import time

    from inference_kernels.judge.stopwatch import Stopwatch

    watch = Stopwatch()
    began = time.monotonic()
    with watch.span("samples"):
        time.sleep(0.02)
        for _ in range(2):
            with watch.span("refresh"):
                time.sleep(0.03)
    whole = time.monotonic() - began
    assert abs(sum(watch.seconds.values()) - whole) < 0.005
    assert 0.06 <= watch.seconds["refresh"] < 0.08
    assert 0.02 <= watch.seconds["samples"] < 0.035  # its own part, not the refreshes


def test_a_case_that_fails_at_its_first_call_still_has_a_breakdown(tmp_path):
    raises = write_candidate(tmp_path, "raises", "def run(*args):\n    raise ValueError('no')\n")
    request = candidates_request(tmp_path, [raises], timeout=60)
    (row,) = [r for r in judge(load_dataset(ROOT / "dataset"), request) if r["type"] == "case"]
    assert row["status"] == "runtime_error", row
    assert {"referee", "inputs", "reference", "worker", "call", "other"} <= set(row["breakdown"])
    assert "samples" not in row["breakdown"]


def test_reference_fills_the_judges_cache_so_a_run_computes_no_reference(tmp_path):
    """`reference --cache DIR` (e.g. --suite all ahead of an audit) stores each workload's
    outputs where `run --cache DIR` looks: the run then spends no time on the reference."""
    from typer.testing import CliRunner

    from inference_kernels.cli import app

    cache = tmp_path / "cache"
    done = CliRunner().invoke(app, ["reference", "-d", DEFINITION, "--cache", str(cache)])
    assert done.exit_code == 0, done.output
    (entry,) = (cache / "references").glob("*.safetensors")
    stored = entry.stat().st_mtime_ns
    honest = write_candidate(tmp_path, "honest", (SOLUTIONS / "honest_main.py").read_text())
    request = candidates_request(tmp_path, [honest], timeout=60, validation_only=True)
    (row,) = [r for r in judge(load_dataset(ROOT / "dataset"), request) if r["type"] == "case"]
    assert row["status"] == "passed", row
    assert entry.stat().st_mtime_ns == stored  # found, not computed again
    assert row["breakdown"]["reference"] < 0.5, row["breakdown"]


def test_the_breakdown_script_says_how_far_a_shapes_calls_a_sample_moved():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts/case_breakdown.py"
    spec = importlib.util.spec_from_file_location("case_breakdown", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    calls = {("a", '{"N": 1}'): [1594, 1165, 807], ("a", '{"N": 2}'): [300, 310], ("b", "{}"): [9]}
    said = script.steadiness(calls)
    assert said.startswith("graph calls a sample: 2 shapes timed more than once, 1 of them over")
    assert said.endswith('the widest, a {"N": 1}: 807 to 1594')
    assert script.steadiness({("b", "{}"): [9]}) == "graph calls a sample: no shape timed twice"
