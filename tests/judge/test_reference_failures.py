"""A reference that hangs (or kills its referee) is waited for once per workload, not
once per solution: the failed reply is reused for the workload's other solutions (it was
retried for each, every time waiting the whole reference timeout)."""

import json
import time

from candidates import DEFINITION

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge.results import ResultWriter
from inference_kernels.judge.scheduler import Job, Options, run_jobs

HANG = """

def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    import time

    time.sleep(600)
"""


def test_a_hanging_reference_is_waited_for_once_per_workload(dataset_copy, tmp_path):
    path = dataset_copy / f"definitions/gdn/{DEFINITION}.json"
    definition = json.loads(path.read_text())
    definition["reference"] += HANG
    path.write_text(json.dumps(definition))
    dataset = load_dataset(dataset_copy)
    baseline = dataset.solutions[f"torch_{DEFINITION}"]
    others = [baseline.model_copy(update={"name": f"copy{i}"}) for i in range(2)]
    workload = dataset.workloads[DEFINITION][0]
    job = Job(dataset.definitions[DEFINITION], workload, dataset.tasks[DEFINITION],
              [baseline, *others])  # fmt: skip
    cache = tmp_path / "cache"
    options = Options(data_root=dataset_copy, cache=cache, folder=tmp_path / "run", timeout=30,
                      reference_timeout=4, validation_only=True)  # fmt: skip
    writer = ResultWriter(None)
    began = time.monotonic()
    run_jobs([job], ["cpu"], options, writer)
    elapsed = time.monotonic() - began
    rows = [(r["solution"], r["status"], r["seconds"]) for r in writer.rows]
    assert [r[1] for r in rows] == ["reference_error"] * 3
    # The first row waited the 4 s reference timeout; the others must reuse its verdict.
    assert rows[1][2] < 2 and rows[2][2] < 2 and elapsed < 10, (rows, elapsed)
