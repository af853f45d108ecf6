"""Run cases over devices: one lane (``lane.py``) per device, each taking workloads from
one shared queue until none are left."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..schema import (
    METHODS,
    CaptureRecord,
    CaseRow,
    Definition,
    Roofline,
    Solution,
    Task,
    Workload,
)
from .lane import Lane
from .results import ResultWriter
from .sandbox import Sandbox


@dataclass
class Job:
    """One workload and the solutions to judge on it."""

    definition: Definition
    workload: Workload
    task: Task
    solutions: list[Solution]
    capture: CaptureRecord | None = None
    roofline: Roofline | None = None  # the definition's least work (dataset/rooflines.py)


@dataclass
class Options:
    data_root: Path
    cache: Path  # reference outputs, kept between runs
    folder: Path  # this run's solution packages and logs
    sandbox: Sandbox | None = None
    timeout: float = 600.0  # for one answer of a worker
    reference_timeout: float = 1800.0
    validation_only: bool = False
    cold_l2: bool = False
    regime: str = "sustained"
    methods: tuple[str, ...] = METHODS  # what a case times
    kernel_times: bool = False  # and its kernels' CUPTI durations (referee.py)
    prefetch: bool | None = None  # the next workload's inputs made during a case; None: on CUDA
    device_type: str = "cpu"  # "cuda" or "cpu": what a Ray task asks for (ray_backend.py)

    @property
    def case_timeout(self) -> float:
        """For the referee's answer on one case: its worker's answers and the references."""
        return 12 * self.timeout + self.reference_timeout


def run_jobs(
    jobs: list[Job],
    devices: list[str],
    options: Options,
    writer: ResultWriter,
    on_row: Callable[[CaseRow], None] = lambda row: None,
    before_job: Callable[[], None] = lambda: None,
) -> None:
    """Judge every job, one lane per device. ``before_job`` runs before each job (it checks
    that the pinned files did not change). An error in a lane (writing a row, a changed
    file) stops all lanes taking new jobs and is raised here once they have closed."""
    pending: queue.Queue[Job] = queue.Queue()
    for job in jobs:
        pending.put(job)
    lanes = [
        Lane(device, options, writer, on_row, _lane_name(devices, index))
        for index, device in enumerate(devices)
    ]
    errors: list[BaseException] = []

    def take() -> Job | None:
        try:
            return pending.get_nowait()
        except queue.Empty:
            return None

    def other_solutions(job: Job, following: Job | None) -> Job | None:
        """The first job after ``job`` (``following``, then the queue) judged by other
        solutions: the next definition's, in a suite's order. Its workers are spawned
        while the lane works through the jobs before it (Referee.ahead). Another lane
        may take it first; the spare is then stopped unused."""
        names = {solution.name for solution in job.solutions}
        with pending.mutex:
            later = list(pending.queue)
        for candidate in [following, *later]:
            if candidate is not None and {s.name for s in candidate.solutions} != names:
                return candidate
        return None

    def drain(lane: Lane) -> None:
        # A lane holds its next job while it runs one, so that its referee can make that
        # job's inputs in the meantime (prefetch.py); at the end of a run a lane may so
        # hold one job another lane would have started sooner. The workers of the next
        # job with other solutions are spawned from the first job before it.
        try:
            job = take()
            while job is not None and not errors:
                before_job()
                following = take()
                lane.run_job(job, following, other_solutions(job, following))
                job = following
        except BaseException as error:
            errors.append(error)
        finally:
            lane.close()

    threads = [threading.Thread(target=drain, args=(lane,), daemon=True) for lane in lanes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _lane_name(devices: list[str], index: int) -> str:
    """The device, numbered where several lanes share it (two CPU lanes in the tests)."""
    device = devices[index]
    if devices.count(device) == 1:
        return device
    return f"{device}.{devices[:index].count(device)}"
