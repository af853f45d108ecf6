"""Messages a solution forges from its worker process cannot decide a verdict.

Solution code runs in its worker and can reach the worker's queues (by walking stack
frames). Each worker has its own queues, the scheduler takes verdicts only from the
verifier's, and the verifier takes requests only from the scheduler: a verdict posted by
the worker is never read. What a worker sends the verifier is unpickled with only the
globals of tensors, so an object whose ``__reduce__`` runs code is refused, not run; and
timed outputs that are not plain tensors are refused in the worker before sending."""

from candidates import ROOT, candidates_request, write_candidate

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge.session import judge

ZEROS = """import torch

from .honest import decode


def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    out, new_state = decode(q, k, v, state, A_log, a, dt_bias, b, scale)
    return torch.zeros_like(out), torch.zeros_like(new_state)
"""

FORGE = """import sys

import torch

from .honest import decode


def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    frame = sys._getframe(1)
    while frame.f_code.co_name != "run_case":
        frame = frame.f_back
    worker, case = frame.f_locals["self"], frame.f_locals["case"]
    worker.results.put(
        {"op": "verified", "case_id": case, "status": "passed", "error": None, "outputs": {}}
    )
    out, new_state = decode(q, k, v, state, A_log, a, dt_bias, b, scale)
    return torch.zeros_like(out), torch.zeros_like(new_state)
"""

PAYLOAD = """PATCH = (
    "import inference_kernels.judge.verifier as v, inference_kernels.acceptance as a\\n"
    "v.compare = lambda actual, expected, tolerance: a.OutputVerdict('passed')\\n"
)


class Payload:
    def __reduce__(self):
        return (exec, (PATCH, {}))
"""

PATCH_VERIFIER = (
    """from .honest import decode

"""
    + PAYLOAD
    + """

_calls = [0]


def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    _calls[0] += 1
    if _calls[0] == 1:  # the checked call is honest
        return decode(q, k, v, state, A_log, a, dt_bias, b, scale)
    return Payload(), Payload()  # timed calls: unpickled by the verifier
"""
)


def _judge(tmp_path, candidates, validation_only):
    request = candidates_request(tmp_path, candidates, validation_only=validation_only, timeout=30)
    rows = judge(load_dataset(ROOT / "dataset"), request)
    return {r["solution"]: r["status"] for r in rows if r.get("uuid")}


def test_a_solution_cannot_post_its_own_verdict(tmp_path):
    forge = write_candidate(tmp_path, "forge", FORGE)
    # Its outputs are zeros (trivial_output); it passed with the verdict it posted.
    assert _judge(tmp_path, [forge], validation_only=True) == {"forge": "trivial_output"}


def test_a_timed_output_cannot_run_code_in_the_verifier(tmp_path):
    patch = write_candidate(tmp_path, "patch_verifier", PATCH_VERIFIER)
    zeros = write_candidate(tmp_path, "zeros", ZEROS)
    outcome = _judge(tmp_path, [patch, zeros], validation_only=False)
    # zeros, judged after patch_verifier by the same verifier, passed; so did patch_verifier,
    # whose timed calls returned no tensors at all.
    assert outcome["zeros"] == "trivial_output", outcome
    assert outcome["patch_verifier"] != "passed", outcome


FOREIGN_TIMED_OUTPUT = """from .honest import decode


class Lazy:
    pass


_calls = [0]


def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    _calls[0] += 1
    if _calls[0] == 1:  # the checked call is honest
        return decode(q, k, v, state, A_log, a, dt_bias, b, scale)
    return Lazy(), Lazy()  # timed calls: objects of a class only the worker can import
"""


def test_a_timed_output_the_verifier_cannot_unpickle_is_blamed_on_the_solution(tmp_path):
    """The verifier's ``queue.get()`` (outside its try) raises ModuleNotFoundError for
    ``_ik_solution_*.main.Lazy``; the verifier dies and the case reads reference_error
    ("the reference could not produce the expected outputs") instead of a solution failure."""
    foreign = write_candidate(tmp_path, "foreign", FOREIGN_TIMED_OUTPUT)
    outcome = _judge(tmp_path, [foreign], validation_only=False)
    assert outcome["foreign"] not in ("passed", "reference_error"), outcome


PAYLOAD_SENT_DIRECTLY = (
    """import sys

from .honest import decode

"""
    + PAYLOAD
    + """

def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    frame = sys._getframe(1)
    while frame.f_code.co_name != "run_case":
        frame = frame.f_back
    worker, case = frame.f_locals["self"], frame.f_locals["case"]
    worker.verify.put({"op": "verify", "case_id": case, "stage": "check",
                       "outputs": [Payload(), Payload()], "inputs": {}})
    return decode(q, k, v, state, A_log, a, dt_bias, b, scale)
"""
)


def test_a_payload_put_on_the_verify_queue_is_refused_not_run(tmp_path):
    sent = write_candidate(tmp_path, "payload_sent_directly", PAYLOAD_SENT_DIRECTLY)
    zeros = write_candidate(tmp_path, "zeros", ZEROS)
    outcome = _judge(tmp_path, [sent, zeros], validation_only=True)
    # The verifier refused the payload (the forged message came first), and it still
    # compares: zeros, judged after by the same verifier, is caught.
    assert outcome == {"payload_sent_directly": "type_mismatch", "zeros": "trivial_output"}
