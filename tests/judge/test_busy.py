"""The sustained regime's background load (``judge/busy.py``): it runs only between
``start`` and ``stop``, ``stop`` returns only once its last round is over (nothing is
timed beside it), and ``paused`` gives the device back for the referee's own work and
resumes only a load that ran. On the CPU the load is a recorded stand-in; on CUDA, bf16
products (the GPU test)."""

import threading
import time

import pytest
import torch

from inference_kernels.judge.busy import Busy, products
from inference_kernels.judge.referee import RESTED_SECONDS, STEADY_MIN_SECONDS, STEADY_SECONDS


class Recorded:
    """A stand-in load: each round notes its start and end, and takes 2 ms."""

    def __init__(self):
        self.log: list[tuple[str, float]] = []
        self.threads: set[str] = set()

    def __call__(self):
        def one_round():
            self.threads.add(threading.current_thread().name)
            self.log.append(("begin", time.monotonic()))
            time.sleep(0.002)
            self.log.append(("end", time.monotonic()))

        return one_round


def _wait_rounds(busy: Busy, rounds: int) -> None:
    deadline = time.monotonic() + 10
    while busy.rounds < rounds:
        assert time.monotonic() < deadline, "the load did not run"
        time.sleep(0.001)


def test_the_load_runs_in_its_own_thread_until_stopped_and_stop_waits_for_its_round():
    work = Recorded()
    busy = Busy(work)
    assert not busy.running
    busy.start()
    busy.start()  # a second start is no second load
    _wait_rounds(busy, 3)
    assert busy.running and work.threads == {"busy"}
    busy.stop()
    stopped = time.monotonic()
    assert not busy.running
    assert work.log[-1][0] == "end" and work.log[-1][1] <= stopped  # no round outlives stop
    rounds = busy.rounds
    time.sleep(0.02)
    assert busy.rounds == rounds  # nothing runs after stop
    busy.stop()  # stopping a stopped load is harmless


def test_paused_resumes_only_a_load_that_ran():
    work = Recorded()
    busy = Busy(work)
    busy.start()
    _wait_rounds(busy, 1)
    with busy.paused():
        assert not busy.running
        during = busy.rounds
        time.sleep(0.01)
        assert busy.rounds == during  # the referee's own work has the device alone
    assert busy.running
    _wait_rounds(busy, during + 1)
    busy.stop()
    with busy.paused():
        assert not busy.running
    assert not busy.running  # it was not running before: it stays stopped


def test_a_load_whose_work_failed_is_not_running_and_starts_again():
    # The referee reads "not running" as "the device rested": it then loads before the
    # samples as after a rest (steady_seconds), rather than not at all.
    failures = []

    def failing():
        def one_round():
            failures.append(1)
            raise RuntimeError("out of memory")

        return one_round

    busy = Busy(failing)
    busy.start()
    deadline = time.monotonic() + 10
    while busy.running:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert failures == [1] and busy.error == "RuntimeError: out of memory"
    busy.start()  # a new thread, not the dead one
    deadline = time.monotonic() + 10
    while len(failures) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    busy.stop()


def test_without_work_there_is_no_load():
    busy = Busy(None)  # the burst regime, or the CPU
    busy.start()
    assert not busy.running and busy.rounds == 0
    busy.stop()


@pytest.mark.gpu
def test_products_load_the_gpu_and_stop_within_a_round():
    device = torch.device("cuda", 0)
    busy = Busy(products(device))
    busy.start()
    _wait_rounds(busy, 20)
    began = time.monotonic()
    busy.stop()
    assert time.monotonic() - began < 0.05  # one round of products is about 1.4 ms


@pytest.mark.gpu
def test_a_lane_loads_the_gpu_between_cases_and_not_before_samples(tmp_path):
    # The first case is preheated (10 s); the next ones find the load running since the
    # last case ended, stop it for their first call and their sizing samples, and end with
    # a steady load of 0.05-0.3 s (what 0.3 s lack after the load since the last rest).
    import json

    from candidates import DEFINITION, ROOT, SOLUTIONS, candidates_request, write_candidate

    from inference_kernels.dataset.layout import load_dataset
    from inference_kernels.judge.session import judge

    task = json.loads((ROOT / f"dataset/tasks/{DEFINITION}.json").read_text())
    honest = write_candidate(tmp_path, "honest", (SOLUTIONS / "honest_main.py").read_text())
    request = candidates_request(
        tmp_path, [honest], workloads=task["dev"][:3], devices=["cuda:0"], regime="sustained"
    )
    rows = [r for r in judge(load_dataset(ROOT / "dataset"), request) if r["type"] == "case"]
    assert [r["status"] for r in rows] == ["passed"] * 3, rows
    loads = [r["breakdown"]["device_load"] for r in rows]
    assert loads[0] >= 10.0, loads  # the preheat
    for row in rows[1:]:
        load = row["breakdown"]["device_load"]
        assert STEADY_MIN_SECONDS <= load < STEADY_SECONDS + 0.1, row["breakdown"]


def test_the_load_comes_back_after_the_first_call_and_stops_before_the_samples(tmp_path):
    # The referee's two halves of a case's load on a stand-in load: after the first call the
    # rest is the time since the load stopped (the call alone), and the load runs again
    # while the referee checks that call; before the samples it stops, and the load they
    # still need is what STEADY_SECONDS lack after the background load since the call.
    from inference_kernels.judge import referee as referee_module

    options = {"folder": str(tmp_path), "cache": str(tmp_path), "validation_only": False}
    referee = referee_module.Referee("cpu", options)
    referee.busy = Busy(Recorded())
    referee.rested_since = time.monotonic() - 0.2  # the load stopped for a 0.2 s first call
    referee._load_again()
    assert referee.busy.running and referee.rested == pytest.approx(0.2, abs=0.05)
    time.sleep(0.1)  # the referee reads and compares the call's outputs under load
    rested, loaded = referee._rest()
    assert not referee.busy.running  # the calibration and samples run alone
    assert rested == pytest.approx(0.2, abs=0.05) and loaded == pytest.approx(0.1, abs=0.05)
    load = referee_module.steady_seconds(rested, loaded)
    assert load == pytest.approx(STEADY_SECONDS - loaded) and load > STEADY_MIN_SECONDS
    referee.rested_since = time.monotonic() - 1.0  # no load since: the rest counts from there
    assert referee._rest()[0] == pytest.approx(1.0, abs=0.05)
    referee.busy = Busy(None)  # no load (burst regime, CPU): nothing comes back
    referee._load_again()
    assert not referee.busy.running


def test_a_sizing_sample_runs_alone_and_only_a_real_rest_starts_the_count_of_load_again(tmp_path):
    # The referee's _alone around a sample that sizes the schedule: the load stops for it
    # and comes back after. A sample shorter than RESTED_SECONDS neither resets the load
    # counted since the first call's rest nor adds to it; a longer one is a rest of its own.
    from inference_kernels.judge import referee as referee_module

    options = {"folder": str(tmp_path), "cache": str(tmp_path), "validation_only": False}
    referee = referee_module.Referee("cpu", options)
    referee.busy = Busy(Recorded())
    referee.rested_since = time.monotonic() - 0.2  # a 0.2 s first call
    referee._load_again(first=True)
    time.sleep(0.1)  # a graph captured under the load
    with referee._alone():
        assert not referee.busy.running
        time.sleep(0.01)  # a short sizing sample
    assert referee.busy.running
    time.sleep(0.1)
    rested, loaded = referee._rest()
    assert not referee.busy.running
    assert rested == pytest.approx(0.2, abs=0.04) and loaded == pytest.approx(0.2, abs=0.04)
    referee.rested_since = time.monotonic()  # the next case: a short first call
    referee._load_again(first=True)
    with referee._alone():
        time.sleep(RESTED_SECONDS + 0.05)  # a long sizing sample: a rest
    time.sleep(0.05)
    rested, loaded = referee._rest()
    assert rested == pytest.approx(RESTED_SECONDS + 0.05, abs=0.04)
    assert loaded == pytest.approx(0.05, abs=0.04)
    assert referee_module.steady_seconds(rested, loaded) == pytest.approx(STEADY_SECONDS - loaded)


def test_rests_each_just_under_the_minimum_add_up_to_a_rest(tmp_path):
    # The attack: a solution keeps its first call and each sizing sample alone just under
    # RESTED_SECONDS, and its setups short, so that the device mostly rests through the
    # case while no single rest counts. The rests add up: once they reach RESTED_SECONDS
    # they are a rest, and the timed rounds follow what STEADY_SECONDS lack of load since.
    from inference_kernels.judge import referee as referee_module

    options = {"folder": str(tmp_path), "cache": str(tmp_path), "validation_only": False}
    referee = referee_module.Referee("cpu", options)
    referee.busy = Busy(Recorded())
    just_under = RESTED_SECONDS * 0.9
    referee.rested_since = time.monotonic() - just_under  # the first call, alone
    referee._load_again(first=True)
    for _ in range(3):  # the calibration's and two methods' sizing samples
        time.sleep(0.005)  # a short setup under the load
        with referee._alone():
            time.sleep(just_under)
    time.sleep(0.005)
    rested, loaded = referee._rest()
    assert rested >= RESTED_SECONDS
    assert loaded < 0.04  # only the load since the rests added up
    assert referee_module.steady_seconds(rested, loaded) > STEADY_SECONDS - 0.04


def test_a_rest_put_in_one_block_before_the_rounds_gets_as_long_a_load(tmp_path):
    # The attack (a review of b6e1d3b): a solution keeps its first call and the calibration
    # short and rests the device in its last sizing sample, just under RESTED_SECONDS, right
    # before the rounds: one rest that does not count, and no load after it but the steady
    # one. That load is as long as the rests added up to, not STEADY_MIN_SECONDS.
    from inference_kernels.judge import referee as referee_module

    options = {"folder": str(tmp_path), "cache": str(tmp_path), "validation_only": False}
    referee = referee_module.Referee("cpu", options)
    referee.busy = Busy(Recorded())
    referee.rested_since = time.monotonic() - 0.001  # a first call of 1 ms
    referee._load_again(first=True)
    with referee._alone():
        time.sleep(0.001)  # the calibration
    with referee._alone():
        time.sleep(RESTED_SECONDS * 0.9)  # the graph's sizing sample, resting the device
    rested, loaded = referee._rest()
    assert rested == pytest.approx(RESTED_SECONDS * 0.9 + 0.002, abs=0.01)
    load = referee_module.steady_seconds(rested, loaded)
    assert load >= RESTED_SECONDS * 0.9 > STEADY_MIN_SECONDS
