"""The referee's graph path on the CPU, through the test-only stand-in for CUDA graphs
(``INFERENCE_KERNELS_FAKE_GRAPH=1``, ``judge/timing.py``): a graph that replays stale
outputs and a patched replay clock get their exact statuses, in CI."""

import os
import sys
from pathlib import Path

import pytest

from inference_kernels import schema
from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge.session import Request, judge

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "exploits"))
from exploit_solutions import DEFINITION, write_candidates  # noqa: E402

EXPECTED = {
    "honest_main": "passed",
    "escape_graph": "graph_output_mismatch",  # returns an earlier result under capture
    "patch_replay": "timing_suspect",  # the replay's clock says a tenth of what it took
}


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    folder = tmp_path_factory.mktemp("graph-stand-in")
    os.environ["INFERENCE_KERNELS_FAKE_GRAPH"] = "1"  # read by the referee and the worker
    try:
        rows = judge(
            load_dataset(ROOT / "dataset"),
            Request(
                definitions=[DEFINITION],
                solutions=[],
                candidates=write_candidates(folder, EXPECTED),
                workloads=None,
                report=folder / "results.jsonl",
                timeout=120,
                cache=folder / "cache",
            ),
        )
    finally:
        del os.environ["INFERENCE_KERNELS_FAKE_GRAPH"]
    return {row["solution"]: row for row in rows if row.get("type") == "case"}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_graph_path_gives_its_status(rows, name):
    assert rows[name]["status"] == EXPECTED[name], rows[name].get("error")


def test_stand_in_graph_times_are_labelled_and_interleaved_with_eager(rows):
    timing = rows["honest_main"]["timing"]
    assert timing["graph"]["method"] == "cpu-graph-stand-in"
    assert timing["eager"]["method"] == "cpu-wall-clock"
    for method in ("eager", "graph"):
        assert timing[method]["rounds"] == len(timing[method]["samples_us"]) >= 1
        assert timing[method]["stopped"] in ("converged", "time_cap")
    assert rows["honest_main"]["outputs"]["graph"]  # a replayed call was checked


def test_the_suspect_graph_is_named(rows):
    assert rows["patch_replay"]["error"].startswith("graph:"), rows["patch_replay"]["error"]
    assert "graph check" in rows["escape_graph"]["error"]


def test_the_judge_writes_only_declared_timing_fields(rows):
    timing = rows["honest_main"]["timing"]
    assert set(timing) <= set(schema.TimingRecord.model_fields)
    for method in ("eager", "graph"):
        assert set(timing[method]) <= set(schema.PhaseTiming.model_fields)
        assert set(timing[method]["outside"]) <= set(schema.OutsideTime.model_fields)
