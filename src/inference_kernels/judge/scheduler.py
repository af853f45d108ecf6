"""Run cases over devices: one lane (``lane.py``) per device, each taking workloads from
one shared queue until none are left."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..schema import CaptureRecord, CaseRow, Definition, Solution, Task, Workload
from .lane import Lane
from .results import ResultWriter


@dataclass
class Job:
    """One workload and the solutions to judge on it."""

    definition: Definition
    workload: Workload
    task: Task
    solutions: list[Solution]
    capture: CaptureRecord | None = None


@dataclass
class Options:
    data_root: Path
    cache: Path
    logs: Path
    timeout: float = 600.0
    reference_timeout: float = 1800.0
    validation_only: bool = False
    cold_l2: bool = False


def run_jobs(
    jobs: list[Job],
    devices: list[str],
    options: Options,
    writer: ResultWriter,
    on_row: Callable[[CaseRow], None] = lambda row: None,
) -> None:
    """Judge every job, one lane per device. An error in a lane (writing a row, say) stops
    all lanes taking new jobs and is raised here once they have closed."""
    pending: queue.Queue[Job] = queue.Queue()
    for job in jobs:
        pending.put(job)
    names = sorted({solution.name for job in jobs for solution in job.solutions})
    lanes = [Lane(device, options, writer, on_row, names) for device in devices]
    errors: list[BaseException] = []

    def drain(lane: Lane) -> None:
        try:
            while not errors:
                try:
                    job = pending.get_nowait()
                except queue.Empty:
                    return
                lane.run_job(job)
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
