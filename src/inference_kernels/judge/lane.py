"""A lane: one device's referee, judging one workload at a time.

The lane runs in a thread of the judge's main process. It starts the device's referee
(``referee.py``, a trusted process that never runs solution code), hands it each
workload and then each solution's case in turn, and turns its answers into rows. A
referee that dies or hangs costs the case it was on (``reference_error``) and is started
again; a lane never reads anything a worker sent.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch.multiprocessing as mp

from .. import statuses
from ..schema import CaseRow, Solution
from . import referee
from .prefetch import request_for
from .results import ResultWriter, digest
from .stopwatch import with_other

if TYPE_CHECKING:
    from .scheduler import Job, Options

context = mp.get_context("spawn")


@dataclass
class Lane:
    device: str
    options: Options
    writer: ResultWriter
    on_row: Callable[[CaseRow], None]
    name: str = ""  # names its logs: the device, or "cpu.1" where two lanes share one
    process: Any = field(default=None, init=False)
    requests: Any = field(default=None, init=False)
    replies: Any = field(default=None, init=False)
    prepared: dict[str, Any] = field(default_factory=dict, init=False)
    started: float = field(default=0.0, init=False)  # seconds the last referee start took

    def __post_init__(self) -> None:
        self.name = self.name or self.device

    def _log(self) -> Path:
        self.options.folder.joinpath("logs").mkdir(parents=True, exist_ok=True)
        return self.options.folder / "logs" / f"{self.name.replace(':', '')}-referee.log"

    def _start(self) -> dict[str, Any]:
        """Start the referee; its hello, or a failure when it died or hung on the way."""
        self.requests, self.replies = context.Queue(), context.Queue()
        settings = {
            "folder": str(self.options.folder),
            "cache": str(self.options.cache),
            "sandbox": self.options.sandbox,
            "timeout": self.options.timeout,
            "validation_only": self.options.validation_only,
            "cold_l2": self.options.cold_l2,
            "regime": self.options.regime,
            "methods": list(self.options.methods),
            "kernel_times": self.options.kernel_times,
            "lane": self.name,
        }
        self.process = context.Process(
            target=referee.main,
            args=(self.device, self.requests, self.replies, settings, str(self._log())),
            daemon=True,
        )
        self.process.start()
        return self._wait("hello", 300)

    def _stop(self) -> None:
        if self.process is not None:
            if self.process.is_alive():
                self.process.kill()
            self.process.join(timeout=10)
        self.process = None

    def close(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.requests.put({"op": "exit"})
            self.process.join(timeout=60)
        self._stop()

    def _wait(self, op: str, seconds: float) -> dict[str, Any]:
        """The referee's answer, or a failure when it dies or hangs (then it is stopped)."""
        waited = 0.0
        while waited < seconds:
            try:
                reply = self.replies.get(timeout=1.0)
            except queue.Empty:
                waited += 1.0
                if not self.process.is_alive():
                    code = self.process.exitcode
                    self._stop()
                    return _failure(f"the referee process died (exit code {code})")
                continue
            if reply.get("op") == op:
                return reply
        self._stop()
        return _failure(f"the referee gave no answer within {seconds:.0f} s")

    def _ask(self, request: dict[str, Any], op: str, seconds: float) -> dict[str, Any]:
        if self.process is None or not self.process.is_alive():
            self._stop()
            began = time.monotonic()
            hello = self._start()
            self.started += time.monotonic() - began  # the case's "referee" step
            if self.process is None:  # the referee did not come up: the case fails, the run goes on
                return hello
        self.requests.put(request)
        return self._wait(op, seconds)

    def _inputs(self, job: Job) -> dict[str, Any]:
        """What names a job's inputs (the referee's prefetch keys on these fields)."""
        return request_for(job.definition, job.workload, job.capture, self.options.data_root)

    def _prefetching(self) -> bool:
        if self.options.prefetch is None:  # on CUDA: on the CPU it would share the timed cores
            return self.device.startswith("cuda")
        return self.options.prefetch

    def run_job(self, job: Job, following: Job | None = None, spawn: Job | None = None) -> None:
        """Judge every solution of ``job``; the referee makes the inputs of ``following``
        (the lane's next job) while they run (prefetch.py), and spawns the workers of
        ``spawn`` (the next job with other solutions), which wait for their case."""
        request = {
            "op": "prepare",
            **self._inputs(job),
            "roofline": job.roofline.model_dump(mode="json") if job.roofline else None,
            "tolerance": job.task.tolerance.model_dump(),
            "timing": job.task.timing.model_dump(),
            "solutions": [solution.name for solution in job.solutions],
        }
        prepared = None
        for solution in job.solutions:
            row = self._row(job, solution)
            started, parts = time.monotonic(), {}
            if prepared is None or (prepared.get("ok") and self.process is None):
                prepared = self._ask(request, "prepared", self.options.reference_timeout)
                parts.update(prepared.get("seconds", {}))  # the workload's: on its first row
                if following is not None and self.process is not None and self._prefetching():
                    ahead: dict[str, Any] = {"op": "prefetch", **self._inputs(following)}
                    if spawn is not None:
                        ahead["spawn"] = {
                            "definition": spawn.definition.model_dump_json(),
                            "solutions": [s.model_dump_json() for s in spawn.solutions],
                        }
                    self.requests.put(ahead)
            if not prepared.get("ok"):
                row.status, row.error = prepared["status"], prepared["error"]
            else:
                row.inputs, row.generator = prepared["inputs"], prepared["generator"]
                row.work = prepared.get("work")
                verdict = self._ask(
                    {"op": "judge", "solution": solution.model_dump_json()},
                    "judged",
                    self.options.case_timeout,
                )
                row.status, row.error = verdict["status"], verdict.get("error")
                row.outputs = verdict.get("outputs", {})
                row.timing = verdict.get("timing", {})
                row.retired = verdict.get("retired")
                parts.update(verdict.get("seconds", {}))
            if self.started:
                parts["referee"], self.started = round(self.started, 3), 0.0
            row.seconds = round(time.monotonic() - started, 3)
            row.breakdown = with_other(parts, row.seconds)
            self.writer.write(row)
            self.on_row(row)

    def _row(self, job: Job, solution: Solution) -> CaseRow:
        return CaseRow(
            definition=job.definition.name,
            solution=solution.name,
            uuid=job.workload.uuid,
            status=statuses.PASSED,
            axes=job.workload.axes,
            device=self.device,
            hashes={
                "solution": digest(solution),
                "definition": digest(job.definition),
                "task": digest(job.task),
            },
        )


def _failure(error: str) -> dict[str, Any]:
    return {"ok": False, "status": statuses.REFERENCE_ERROR, "error": error}
