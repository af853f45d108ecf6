"""Python's garbage collector out of the judge's timed paths (``judge/collector.py``): a
full collection of the referee's heap fell in the decoding of a 4,000-call graph's
``ready`` in every other try (105-176 ms on the CI machine), and in the referee's time of a
sample wherever it fell there."""

import gc
import weakref
from pathlib import Path

import pytest
import torch

from inference_kernels import schema
from inference_kernels.judge import collector
from inference_kernels.judge import referee as referee_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def collecting():
    gc.enable()
    yield
    gc.enable()


@pytest.mark.usefixtures("collecting")
def test_paused_stops_collections_and_gives_back_the_state_before_it():
    with collector.paused():
        assert not gc.isenabled()
        with collector.paused():  # nested: still paused after the inner block
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector.paused():
        raise RuntimeError("a case that ended badly")
    assert gc.isenabled()
    gc.disable()  # one that was off stays off
    with collector.paused():
        pass
    assert not gc.isenabled()


@pytest.mark.usefixtures("collecting")
def test_freeze_leaves_what_lives_now_out_of_later_collections():
    made = [[index] for index in range(1000)]  # objects the collector tracks
    ids = {id(item) for item in made}
    assert ids <= {id(tracked) for tracked in gc.get_objects()}
    try:
        collector.freeze()
        assert not ids & {id(tracked) for tracked in gc.get_objects()}  # walked by none
        later = [0]
        assert id(later) in {id(tracked) for tracked in gc.get_objects()}
    finally:
        gc.unfreeze()


@pytest.mark.usefixtures("collecting")
def test_the_referee_judges_a_case_with_the_collector_paused_and_resumes_it_after(tmp_path):
    options = {"folder": str(tmp_path), "cache": str(tmp_path), "validation_only": False}
    referee = referee_module.Referee("cpu", options)
    seen = []

    class Worker:
        def end_case(self, watch):
            seen.append(("end", gc.isenabled()))

    class Cycle:  # what a case may leave: objects that refer to each other, and memory
        def __init__(self):
            self.me, self.memory = self, torch.zeros(1 << 20)

    left = []

    def case(worker, verdict):
        seen.append(("case", gc.isenabled()))
        left.append(weakref.ref(Cycle()))  # unreachable at once, freed only by a collection
        assert left[0]() is not None  # (no collection in the case)

    referee.current = object()  # a prepared workload (the case below does not read it)
    referee._worker = lambda solution: Worker()
    referee._case = case
    path = next((ROOT / "dataset/solutions").rglob("*.json"))
    solution = schema.Solution.model_validate_json(path.read_text())
    verdict = referee.judge({"solution": solution.model_dump_json()})
    assert verdict["status"] == "passed"
    assert seen == [("case", False), ("end", False)]  # the worker let go within the pause
    assert gc.isenabled()
    assert left[0]() is None  # collected before the next case
