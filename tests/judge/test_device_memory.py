"""What a worker may keep on the device between its cases (``judge/device_memory.py``).

A frozen worker keeps what it holds; one that held much of the device could make the next
solution's graph captures fail and its samples shorter. The referee reads what the
worker's processes hold (NVML) after each case and ends a worker that holds too much."""

import os

from candidates import prepared_referee

from inference_kernels.judge import device_memory
from inference_kernels.judge.signals import belongs


def test_a_worker_holds_what_nvml_lists_for_its_processes_only():
    listed = [(10, 3 << 30), (11, 2 << 30), (12, 7 << 30)]
    assert device_memory.total(lambda pid: pid in (10, 11), listed) == 5 << 30
    assert device_memory.total(lambda pid: False, listed) == 0
    assert device_memory.total(lambda pid: pid == 10, [(10, None)]) is None  # NVML hides it
    assert device_memory.too_much(None) is None and device_memory.too_much(4 << 30) is None
    reason = device_memory.too_much((4 << 30) + 1)
    assert reason.startswith("held 4.0 GiB of device memory after its case")


def test_the_processes_of_a_worker_are_its_uid_or_its_tree():
    me, parent = os.getpid(), os.getppid()
    assert belongs(me, os.getuid(), root=1)
    assert not belongs(me, os.getuid() + 1, root=1)
    assert belongs(me, None, root=parent) and belongs(me, None, root=me)
    assert not belongs(parent, None, root=me)
    assert not belongs(2**22 + 12345, None, root=me)  # no such process


def test_a_worker_that_keeps_too_much_device_memory_goes_and_its_row_says_why(tmp_path):
    referee, message = prepared_referee(tmp_path, ["eager"])
    try:
        held = {"bytes": 0}
        seen = []

        def holdings(owns):
            seen.append(owns(next(iter(referee.workers.values())).process.pid))
            return held["bytes"]

        referee.holdings = holdings
        verdict = referee.judge(message)
        assert verdict["status"] == "passed" and "retired" not in verdict
        first = next(iter(referee.workers.values()))
        assert seen == [True]  # asked about the worker's own process
        held["bytes"] = (4 << 30) + (1 << 20)
        verdict = referee.judge(message)
        assert verdict["status"] == "passed"
        assert "held 4.0 GiB of device memory" in verdict["retired"]
        assert not referee.workers and not first.alive()  # ended, not left frozen
        held["bytes"] = 0
        verdict = referee.judge(message)  # a new worker for the next case
        assert verdict["status"] == "passed" and "retired" not in verdict
        assert next(iter(referee.workers.values())) is not first
    finally:
        referee.close()


# Starts a thread that would outlive a failed load, then fails it.
LEFT_RUNNING = """import threading
import time


def _hold():
    while True:
        time.sleep(0.01)


threading.Thread(target=_hold).start()
raise RuntimeError("fails its load on purpose, its thread left running")
"""


def test_a_worker_whose_load_failed_does_not_live_on_beside_later_cases(tmp_path):
    import json

    from candidates import write_candidate

    from inference_kernels import schema

    path = write_candidate(tmp_path, "left_running", LEFT_RUNNING)
    solution = schema.Solution.model_validate(json.loads(path.read_text()))
    referee, message = prepared_referee(tmp_path, ["eager"])
    try:
        broken = {"solution": solution.model_dump_json()}
        verdict = referee.judge(broken)
        assert verdict["status"] == "load_failed" and "on purpose" in verdict["error"]
        handle = referee.workers["left_running"]
        assert not handle.alive()  # never frozen nor read: it must not run on
        assert referee.judge(broken)["status"] == "load_failed"  # again, no new worker
        assert referee.workers["left_running"] is handle
        assert referee.judge(message)["status"] == "passed"
    finally:
        referee.close()


def test_nothing_is_bounded_where_nvml_does_not_list_the_referee_itself(monkeypatch, capsys):
    import sys
    import types

    import torch

    listed = []
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByUUID=lambda uuid: uuid,
        nvmlDeviceGetComputeRunningProcesses=lambda handle: [
            types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in listed
        ],
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    properties = types.SimpleNamespace(uuid="GPU-test")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: properties)
    held = device_memory.reader(torch.device("cuda", 0))
    worker = os.getpid() + 1  # (a pid of the worker's, as owns() decides)
    listed[:] = [(os.getpid(), 600 << 20), (worker, 5 << 30), (worker + 1, 1 << 30)]
    assert held(lambda pid: pid == worker) == 5 << 30
    # listed under other ids (another PID namespace): the referee's own pid is not there
    listed[:] = [(os.getpid() + 100, 600 << 20), (worker, 5 << 30)]
    assert held(lambda pid: pid == worker) is None
    assert held(lambda pid: pid == worker) is None
    said = capsys.readouterr().out
    assert said.count("what a worker keeps between cases is not bounded") == 1


def test_a_worker_whose_input_buffers_outgrew_its_pool_goes_at_the_end_of_its_case(
    tmp_path, monkeypatch
):
    """A worker may keep POOL_CPU bytes of input buffers between its cases; one that holds
    more goes as its case ends, its buffers with it, before any other solution's case (the
    red team's finding at 99ea315: kept until the solution's own next case, the grouped
    GEMMs' buffers of every solution judged before stayed mapped in the referee, which was
    killed for memory during the next solution's case)."""
    from inference_kernels.judge import referee as referee_module

    referee, message = prepared_referee(tmp_path, ["eager"])
    try:
        verdict = referee.judge(message)
        assert verdict["status"] == "passed"
        (first,) = referee.workers.values()
        held = first.pooled()
        assert 0 < held <= referee_module.POOL_CPU
        assert first.alive() and first.frozen  # within POOL_CPU: kept, frozen, for its next case
        monkeypatch.setattr(referee_module, "POOL_CPU", 0)  # now any buffer is too much
        verdict = referee.judge(message)
        assert verdict["status"] == "passed"
        assert not referee.workers and not first.alive()  # gone as its case ended
        assert first.pool == []  # and its buffers freed
    finally:
        referee.close()
