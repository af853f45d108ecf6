"""Timed calls must leave outputs to verify and must not raise. A launch that returned
nothing used to be timed and never verified (its time became the case's time), and a
method whose timed calls raised was recorded as {"error"} while the case passed."""

import pytest
from candidates import ROOT, candidates_request, write_candidate

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge.session import judge
from inference_kernels.report.rows import case_time

PREPARED_NOTHING = """from .honest import decode as run


def prepare(q, k, v, state, A_log, a, dt_bias, b, scale):
    return lambda: None  # the prepared launch computes nothing and returns nothing
"""

EAGER_NOTHING = """from .honest import decode

_calls = [0]


def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    _calls[0] += 1
    if _calls[0] == 1:  # the checked call
        return decode(q, k, v, state, A_log, a, dt_bias, b, scale)
    return None
"""

EAGER_RAISES = """from .honest import decode

_calls = [0]


def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    _calls[0] += 1
    if _calls[0] > 1:
        raise RuntimeError("out of resources in the timed calls")
    return decode(q, k, v, state, A_log, a, dt_bias, b, scale)
"""


def _row(tmp_path, name, main, timeout=30):
    candidate = write_candidate(tmp_path, name, main)
    request = candidates_request(tmp_path, [candidate], timeout=timeout)
    rows = judge(load_dataset(ROOT / "dataset"), request)
    (row,) = [r for r in rows if r.get("uuid")]
    return row


@pytest.mark.parametrize(
    ("name", "main", "method"),
    [("prepared_nothing", PREPARED_NOTHING, "prepared"), ("eager_nothing", EAGER_NOTHING, "eager")],
)
def test_timed_calls_that_return_nothing_do_not_pass(tmp_path, name, main, method):
    row = _row(tmp_path, name, main)
    # It passed, and its time was that of the calls that returned nothing.
    assert row["status"] == "timed_output_mismatch", (row["status"], case_time(row))
    assert f"{method} call returned no outputs" in row["error"]


def test_timed_calls_that_raise_are_a_timing_error(tmp_path):
    row = _row(tmp_path, "eager_raises", EAGER_RAISES)
    # statuses.TIMING_ERROR: "The timed calls raised (the checked call had passed)".
    # It passed, with timing {"eager": {"error": ...}} and no time.
    assert row["status"] == "timing_error", (row["status"], row["timing"].get("eager"))


UNPICKLABLE_WHEN_TIMED = """from .honest import decode

_calls = [0]


def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    _calls[0] += 1
    if _calls[0] == 1:
        return decode(q, k, v, state, A_log, a, dt_bias, b, scale)
    return (lambda: 0), (lambda: 0)  # timed calls: outputs that cannot be pickled
"""


def test_timed_outputs_that_cannot_be_sent_are_not_a_timeout(tmp_path):
    """Outputs that are not tensors once failed to pickle in the worker's queue feeder
    thread: the message was lost and the case waited the whole --timeout."""
    row = _row(tmp_path, "unpicklable_when_timed", UNPICKLABLE_WHEN_TIMED, timeout=5)
    assert row["status"] == "timed_output_mismatch", (row["status"], row.get("error"))
