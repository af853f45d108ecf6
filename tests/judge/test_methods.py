"""``run --methods``: what a case times. An audit times only the CUDA graph (here the CPU
stand-in, ``INFERENCE_KERNELS_FAKE_GRAPH=1``); a solution whose graph cannot be captured
is still timed, by its plain calls; a report is resumed only with the methods it was
timed with. And the sustained regime's load before a case (``steady_seconds``)."""

import os
import sys
from pathlib import Path

import pytest

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.errors import DatasetError
from inference_kernels.judge import referee
from inference_kernels.judge.session import Request, judge

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "exploits"))
from exploit_solutions import exploit_request  # noqa: E402


def _request(folder: Path, **extra) -> Request:
    return exploit_request(folder, ["honest_main", "uncapturable"], **extra)


@pytest.fixture(scope="module")
def graph_only(tmp_path_factory):
    folder = tmp_path_factory.mktemp("methods")
    os.environ["INFERENCE_KERNELS_FAKE_GRAPH"] = "1"  # read by the referee and the worker
    try:
        rows = judge(load_dataset(ROOT / "dataset"), _request(folder, methods=("graph",)))
    finally:
        del os.environ["INFERENCE_KERNELS_FAKE_GRAPH"]
    return folder, rows


def _cases(rows) -> dict[str, dict]:
    return {row["solution"]: row for row in rows if row.get("type") == "case"}


def test_graph_only_times_the_graph_and_nothing_else(graph_only):
    _, rows = graph_only
    environment = next(row for row in rows if row.get("type") == "environment")
    assert environment["methods"] == ["graph"]
    honest = _cases(rows)["honest_main"]
    assert honest["status"] == "passed", honest.get("error")
    timed = {k for k, v in honest["timing"].items() if isinstance(v, dict) and "method" in v}
    assert timed == {"graph"}
    assert honest["timing"]["graph"]["method"] == "cpu-graph-stand-in"
    assert honest["timing"]["graph"]["rounds"] >= 1


def test_a_graph_that_cannot_be_captured_falls_back_to_plain_calls(graph_only):
    _, rows = graph_only
    row = _cases(rows)["uncapturable"]
    assert row["status"] == "passed", row.get("error")
    assert "capturing" in row["timing"]["graph"]["error"]
    assert row["timing"]["eager"]["method"] == "cpu-wall-clock"
    assert row["timing"]["eager"]["rounds"] >= 1


def test_a_report_is_resumed_only_with_its_methods(graph_only):
    folder, _ = graph_only
    with pytest.raises(DatasetError, match="resume with --methods graph"):
        judge(load_dataset(ROOT / "dataset"), _request(folder, resume=True))


def test_unknown_methods_are_refused():
    with pytest.raises(ValueError, match="not some of"):
        Request(methods=("graphs",))


@pytest.mark.parametrize(
    ("rested", "loaded", "load"),
    [
        (None, 0.0, 0.3),
        (0.01, 0.0, 0.05),
        (0.049, 0.0, 0.05),
        (0.06, 0.0, 0.06),  # the alone parts of most cases: as long a load
        (0.099, 0.04, 0.099),  # (the background load between them does not count)
        (0.1, 0.0, 0.3),
        (1.0, 0.0, 0.3),
        (30.0, 0.0, 0.3),
        (1.0, 0.1, 0.2),  # the background load since the rest counts
        (1.0, 0.28, 0.05),  # but never less than the short load
        (0.01, 5.0, 0.05),
    ],
)
def test_the_load_before_a_case_is_short_only_when_the_device_hardly_rested(rested, loaded, load):
    assert referee.steady_seconds(rested, loaded) == pytest.approx(load)
