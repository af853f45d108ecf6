"""An exception while a lane handles a row (``on_row``, the writer, or the scheduler) used
to end that lane's thread silently: ``judge`` returned as if complete, with rows missing.
It now stops the run and reaches the caller. Timed outputs the referee cannot compare
(sparse tensors) cost only their own case."""

from candidates import ROOT, SOLUTIONS, candidates_request, write_candidate

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge.session import judge

HONEST = (SOLUTIONS / "honest_main.py").read_text()


def test_a_failing_row_callback_does_not_silently_drop_the_remaining_cases(tmp_path):
    first = write_candidate(tmp_path, "first", HONEST)
    second = write_candidate(tmp_path, "second", HONEST)
    request = candidates_request(tmp_path, [first, second], validation_only=True, timeout=30)
    seen = []

    def on_row(row):
        seen.append(row.solution)
        if row.uuid and len(seen) == 2:  # the first case row: e.g. a closed stderr pipe
            raise BrokenPipeError("stderr is gone")

    raised = None
    try:
        rows = judge(load_dataset(ROOT / "dataset"), request, on_row)
    except BrokenPipeError as error:
        raised = error
        rows = None
    cases = [r for r in rows or [] if r.get("uuid")]
    # Either the failure reaches the caller, or every case still gets its row.
    assert raised is not None or [r["solution"] for r in cases] == ["first", "second"], cases


SPARSE_WHEN_TIMED = """from .honest import decode

_calls = [0]


def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    _calls[0] += 1
    out, new_state = decode(q, k, v, state, A_log, a, dt_bias, b, scale)
    if _calls[0] == 1:  # the checked call returns dense tensors
        return out, new_state
    return out.to_sparse(), new_state.to_sparse()  # timed calls: sparse COO tensors
"""


def test_sparse_timed_outputs_cost_only_that_case(tmp_path):
    """The judge's verifier once raised on a sparse timed output (compare has no sparse kernels),
    and the lane thread died: that case and every later case of the run got no row."""
    sparse = write_candidate(tmp_path, "sparse_when_timed", SPARSE_WHEN_TIMED)
    honest = write_candidate(tmp_path, "honest", HONEST)
    request = candidates_request(tmp_path, [sparse, honest], timeout=30)
    rows = judge(load_dataset(ROOT / "dataset"), request)
    outcome = {r["solution"]: r["status"] for r in rows if r.get("uuid")}
    assert set(outcome) == {"sparse_when_timed", "honest"}, outcome
    assert outcome["honest"] == "passed"
    assert outcome["sparse_when_timed"] == "timed_output_mismatch"


def test_a_referee_that_cannot_start_costs_the_case_not_the_run(tmp_path):
    """A referee that died before its hello (here: a CUDA device on a machine without one)
    used to crash the lane thread with an AttributeError, ending the whole run; the case
    now fails as a reference error that says the referee died."""
    import torch

    from inference_kernels.judge.lane import Lane
    from inference_kernels.judge.scheduler import Options

    if torch.cuda.is_available():  # the referee would come up
        device = f"cuda:{torch.cuda.device_count()}"
    else:
        device = "cuda:0"
    options = Options(data_root=ROOT / "dataset", cache=tmp_path / "cache", folder=tmp_path)
    lane = Lane(device=device, options=options, writer=None, on_row=lambda row: None)
    reply = lane._ask({"op": "prepare"}, "prepared", 60)
    assert reply["ok"] is False and reply["status"] == "reference_error", reply
    assert "referee process died" in reply["error"], reply
    assert lane.process is None
