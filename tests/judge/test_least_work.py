"""Every row of a workload carries its least work (dataset/rooflines.py), counted by the
referee from the pristine inputs: outside the sandbox, so a solution has no say in it."""

from candidates import ROOT, SOLUTIONS, candidates_request, write_candidate

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge.session import judge


def test_a_judged_row_carries_its_workloads_least_work(tmp_path):
    candidate = write_candidate(tmp_path, "honest", (SOLUTIONS / "honest_main.py").read_text())
    request = candidates_request(tmp_path, [candidate], validation_only=True)
    rows = [r for r in judge(load_dataset(ROOT / "dataset"), request) if r["type"] == "case"]
    assert rows and all(r["status"] == "passed" for r in rows), rows
    for row in rows:  # GDN decode: 7 K V per token and value head; the fp32 state twice
        batch = row["axes"]["batch_size"]
        assert row["work"]["flops"] == 7 * batch * 8 * 128 * 128
        assert row["work"]["bytes"] > 2 * batch * 8 * 128 * 128 * 4
        assert row["work"]["math"] == "fp32"
        assert "least_work" in row["breakdown"]  # a step of its own, apart from the inputs


def test_a_count_that_fails_is_noted_and_the_case_still_judged(tmp_path):
    from candidates import DEFINITION

    dataset = load_dataset(ROOT / "dataset")
    broken = dataset.rooflines[DEFINITION].model_copy(update={"flops": "batch_size // 0"})
    dataset.rooflines[DEFINITION] = broken
    candidate = write_candidate(tmp_path, "honest", (SOLUTIONS / "honest_main.py").read_text())
    request = candidates_request(tmp_path, [candidate], validation_only=True)
    rows = [r for r in judge(dataset, request) if r["type"] == "case"]
    assert rows and all(r["status"] == "passed" for r in rows), rows
    assert all(r["work"]["error"].startswith("ValueError: flops: cannot evaluate") for r in rows)
    assert all(r["work"].get("flops") is None for r in rows)
