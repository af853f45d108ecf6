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
