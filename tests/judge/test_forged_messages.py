"""Messages a solution forges from inside its worker cannot decide a verdict.

Solution code runs in the worker and can reach everything there: the Worker object (by
walking the garbage collector) and its socket to the referee. Whatever it sends is data
the referee validates against the closed protocol (``protocol.py``): a worker can only
report a failure of its own solution, never that anything passed, and nothing it sends is
unpickled. Each forgery ends its own case with ``protocol_violation``, and the referee
still judges the next solution right (``zeros`` after it is caught as trivial output).
"""

import pytest
from candidates import ROOT, candidates_request, write_candidate

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge.session import judge

ZEROS = """import torch

from .honest import decode


def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    out, new_state = decode(q, k, v, state, A_log, a, dt_bias, b, scale)
    return torch.zeros_like(out), torch.zeros_like(new_state)
"""

SEND = """import pickle
import struct

import torch

from .honest import decode, find_worker


def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    channel = find_worker().channel
    FORGE
    out, new_state = decode(q, k, v, state, A_log, a, dt_bias, b, scale)
    return torch.zeros_like(out), torch.zeros_like(new_state)
"""

FORGERIES = {
    # a verdict of its own
    "verdict": 'channel.send({"op": "verdict", "status": "passed"})',
    # the answer the referee waits for, with a status field the protocol has not got
    "checked_passed": 'channel.send({"op": "checked", "status": "passed"})',
    # a failure report whose status is not a failure
    "failed_passed": 'channel.send({"op": "failed", "status": "passed", "error": ""})',
    # a pickle whose unpickling would run code, framed as a message
    "pickle": (
        "body = pickle.dumps(Exception('x'));"
        " channel.sock.sendall(struct.pack('<II', len(body), 0) + body)"
    ),
    # kernel durations of its own (run --kernel-times), sent where no profiled sample is due
    "kernels": 'channel.send({"op": "kernels", "us": 0.001, "launches": 1.0})',
    # a frame announcing more JSON than any message may hold
    "huge": "channel.sock.sendall(struct.pack('<II', 1 << 31, 0))",
}


def _judge(tmp_path, candidates, validation_only):
    request = candidates_request(tmp_path, candidates, validation_only=validation_only, timeout=30)
    rows = judge(load_dataset(ROOT / "dataset"), request)
    return {r["solution"]: (r["status"], r.get("error")) for r in rows if r.get("uuid")}


@pytest.fixture(scope="module")
def forged(tmp_path_factory):
    folder = tmp_path_factory.mktemp("forged")
    candidates = [
        write_candidate(folder, name, SEND.replace("FORGE", code))
        for name, code in FORGERIES.items()
    ]
    candidates.append(write_candidate(folder, "zeros", ZEROS))
    return _judge(folder, candidates, validation_only=True)


@pytest.mark.parametrize("name", list(FORGERIES))
def test_a_forged_message_ends_its_own_case_as_a_protocol_violation(forged, name):
    status, error = forged[name]
    assert status == "protocol_violation", error
    assert "the worker sent a message the judge refuses" in error


def test_the_referee_still_judges_after_the_forgeries(forged):
    assert forged["zeros"][0] == "trivial_output"


PAYLOAD = """class Payload:
    def __reduce__(self):
        return (exec, ("import os; os._exit(9)", {}))
"""

NOT_TENSORS_WHEN_TIMED = (
    """from .honest import decode

"""
    + PAYLOAD
    + """

_calls = [0]


def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    _calls[0] += 1
    if _calls[0] == 1:  # the checked call is honest
        return decode(q, k, v, state, A_log, a, dt_bias, b, scale)
    return Payload(), Payload()  # timed calls: objects that would run code if unpickled
"""
)


def test_timed_outputs_that_are_not_tensors_are_the_solutions_failure(tmp_path):
    payload = write_candidate(tmp_path, "payload", NOT_TENSORS_WHEN_TIMED)
    zeros = write_candidate(tmp_path, "zeros", ZEROS)
    outcome = _judge(tmp_path, [payload, zeros], validation_only=False)
    assert outcome["payload"][0] == "timed_output_mismatch", outcome
    assert "not a plain torch.Tensor" in outcome["payload"][1]
    assert outcome["zeros"][0] == "trivial_output", outcome
