"""A worker that timed out while loading used to answer "loaded" later, and the next
solution's load wait took that answer as its own. Each worker now answers on its own queue,
and a load that times out is stopped."""

import json

from candidates import ROOT, candidates_request, write_candidate

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge.session import judge

# Loads for longer than the load timeout (8 s), then fails to import.
SLOW_BROKEN = """import time

time.sleep(8)
raise RuntimeError("slow_broken never loads")
"""

# Loads in about 3 s (well within the 8 s timeout), then is correct.
SLOW_HONEST = """import time

from .honest import decode

time.sleep(3)


def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    return decode(q, k, v, state, A_log, a, dt_bias, b, scale)
"""


def test_a_late_load_answer_is_not_taken_for_the_next_solutions(tmp_path):
    broken = write_candidate(tmp_path, "slow_broken", SLOW_BROKEN)
    honest = write_candidate(tmp_path, "slow_honest", SLOW_HONEST)
    request = candidates_request(tmp_path, [broken, honest], validation_only=True, timeout=8)
    rows = judge(load_dataset(ROOT / "dataset"), request)
    outcome = {r["solution"]: (r["status"], r.get("error")) for r in rows if r.get("uuid")}
    assert outcome["slow_broken"][0] == "load_failed"
    assert "no answer within" in outcome["slow_broken"][1]
    # slow_honest loads in ~3 s + process start-up, within its own 8 s: it must pass. It got
    # slow_broken's late "importing main.py failed: RuntimeError" instead.
    assert outcome["slow_honest"] == ("passed", None), json.dumps(outcome)
