"""The outside check's limits on CUDA (judge/outside.py), on the figures that set them."""

import pytest

from inference_kernels.judge import outside

# The README walkthrough's Triton GEMM on the H200 (M=1): a 4,000-call graph, the worker's
# 4.02 us per call, 5.15 us per call seen from outside in every sample but the first.
CALLS, REPORTED, SEEN = 4000, 4.02, 5.15e-6 * 4000


def _suspect(method: str, reported: float, seen: float, outputs: int = 1) -> str | None:
    per_call = outside.allowed_per_call(method, "cuda", outputs, output_bytes=768)
    _, reason = outside.check(method, [reported] * 7, [seen] * 7, CALLS, "cuda", per_call)
    return reason


def test_an_honest_long_graph_is_not_suspect():
    # Without the graph's launch allowance it was (by 0.03 us per call).
    assert (
        SEEN > (1 + outside.TOLERANCE["cuda"]) * REPORTED * 1e-6 * CALLS + outside.ALLOWANCE["cuda"]
    )
    assert _suspect("graph", REPORTED, SEEN) is None


def test_a_graph_that_reports_less_than_the_limit_is_suspect():
    # The limit: outside <= 1.15 x reported + 2 ms + 0.5 us per call, so 4.02 us per call
    # seen as 5.15 allows a report down to (5.15 - 0.5 - 0.5) / 1.15 = 3.61 us.
    assert _suspect("graph", 3.65, SEEN) is None
    reason = _suspect("graph", 3.55, SEEN)
    assert reason is not None and "3.5 us per call" in reason and "5.1 us per call" in reason


def test_the_graph_allowance_is_not_given_to_eager_calls():
    per_call = outside.allowed_per_call("eager", "cuda", 1, output_bytes=768)
    assert per_call == outside.PER_OUTPUT["cuda"]
    assert outside.allowed_per_call("graph", "cuda", 1, 768) == outside.PER_GRAPH_CALL["cuda"]


def test_a_report_longer_than_the_referee_saw_is_suspect():
    # The referee's time of a sample brackets the worker's: an honest report is never longer.
    # The early-header attack made the referee's time nil; one sample of it is enough.
    seen = [SEEN] * 6 + [1e-4]
    per_call = outside.allowed_per_call("graph", "cuda", 1, output_bytes=768)
    _, reason = outside.check("graph", [REPORTED] * 7, seen, CALLS, "cuda", per_call)
    assert reason is not None and "more than the judge saw" in reason
    # Within the slack (2% and 100 us of a sample) an equal report is honest.
    equal = [REPORTED * 1e-6 * CALLS] * 7
    assert outside.check("graph", [REPORTED] * 7, equal, CALLS, "cuda", per_call)[1] is None


def test_a_time_counts_only_where_the_check_resolves_it():
    # H100 rows at 7d1412d: a 4,000-call graph of 3.48 us (resolution 1.0) counts; the QSA
    # sparse decode's 12 calls of 8.9 us a sample (its sets of 510 MB: resolution 167) not
    assert outside.resolved(3.48, 1.0) and outside.resolved(1.0, 1.0)
    assert not outside.resolved(8.9, 167.2) and not outside.resolved(1.0, 1.01)
    # what a counted time can hide: a report r passes while the calls take up to
    # (1 + TOLERANCE) r + resolution, at most (1 + TOLERANCE + RESOLVED_WITHIN) r
    assert 1 + outside.TOLERANCE["cuda"] + outside.RESOLVED_WITHIN == pytest.approx(2.15)
