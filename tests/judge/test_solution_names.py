"""Two candidates with the same solution name (two main.py files from different folders
are both "candidate:main.py") shared one worker in a lane (``Lane.workers`` is keyed by
name), so the second was judged by running the first one's code. Rows and --resume are
keyed by name too, so the second is now refused."""

from candidates import ROOT, SOLUTIONS, candidates_request

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge.session import judge

HONEST = (SOLUTIONS / "honest.py").read_text()
ZEROS = """

def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    out, new_state = decode(q, k, v, state, A_log, a, dt_bias, b, scale)
    return torch.zeros_like(out), torch.zeros_like(new_state)
"""


def test_two_candidate_files_of_one_name_are_each_judged_on_their_own_code(tmp_path):
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    good, bad = tmp_path / "v1/main.py", tmp_path / "v2/main.py"
    good.write_text(HONEST + "\nrun = decode\n")
    bad.write_text(HONEST + ZEROS)
    request = candidates_request(tmp_path, [good, bad], validation_only=True, timeout=30)
    rows = [r for r in judge(load_dataset(ROOT / "dataset"), request) if r["type"] == "case"]
    named = sorted((r["status"], r.get("uuid") is None) for r in rows)
    # v2/main.py must not be judged as v1 (it was: one worker per name ran v1's code for
    # both); it is refused with a failed row that names it, and v1 is judged.
    assert named == [("load_failed", True), ("passed", False)]
    (refused,) = [r for r in rows if r["status"] == "load_failed"]
    assert "v2/main.py" in refused["error"] and "rename" in refused["error"]
