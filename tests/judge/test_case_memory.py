"""What a case holds is freed when the case ends, by reference counting alone.

A case's sampler holds the workload's fresh pools, its timing input sets and the outputs
kept for the checks: on the H200 over 20 GB for the largest neighborhood attention
(B 4, T 121, 80 x 128, kernel 11^3). Held in a reference cycle, each case's sampler lived
until the referee's next full garbage collection, and an audit ran the referee out of
device memory (85 GiB held by PyTorch at that workload, twelfth session)."""

import gc
from pathlib import Path

from candidates import DEFINITION

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge import timing
from inference_kernels.judge.fresh import Fresh
from inference_kernels.judge.referee import Referee
from inference_kernels.judge.sampling import Sampler
from inference_kernels.judge.sets import InputSets

ROOT = Path(__file__).resolve().parents[2]


def test_no_sampler_outlives_its_case(tmp_path, monkeypatch):
    # with the CPU's stand-in for graphs: their sets grow after sizing (the sampler's grow)
    monkeypatch.setenv("INFERENCE_KERNELS_FAKE_GRAPH", "1")  # for the worker
    monkeypatch.setattr(timing, "FAKE_GRAPH", True)
    dataset = load_dataset(ROOT / "dataset")
    task = dataset.tasks[DEFINITION]
    solution = dataset.solutions[task.baseline]
    workload = min(dataset.workloads[DEFINITION], key=lambda w: sum(w.axes.values()))
    options = {
        "folder": str(tmp_path),
        "cache": str(tmp_path / "cache"),
        "sandbox": None,
        "timeout": 60,
        "lane": "cpu",
        "validation_only": False,
        "regime": "sustained",
        "methods": ["eager", "graph"],
    }
    referee = Referee("cpu", options)
    gc.collect()
    gc.disable()  # what a full collection would free is not freed here
    try:
        prepared = referee.prepare(
            {
                "definition": dataset.definitions[DEFINITION].model_dump_json(),
                "workload": workload.model_dump(mode="json"),
                "capture": None,
                "data_root": str(ROOT / "dataset"),
                "roofline": None,
                "tolerance": task.tolerance.model_dump(),
                "timing": task.timing.model_dump(),
                "solutions": [solution.name],
            }
        )
        assert prepared["ok"], prepared
        for _ in range(2):
            verdict = referee.judge({"solution": solution.model_dump_json()})
            assert verdict["status"] == "passed", verdict
            assert {"eager", "graph"} <= set(verdict["timing"])  # timed: a sampler was made
            alive = [type(o) for o in gc.get_objects() if type(o) in (Sampler, InputSets, Fresh)]
            assert alive == [Fresh]  # the workload's own, until the next one is prepared
    finally:
        gc.enable()
        referee.close()
