"""A lane: one device's verifier and solution workers, judging one workload at a time.

Its verifier prepares the pristine inputs and reference outputs, then each solution's
worker (started on first use, replaced after a crash or a hang) runs the case. Each
stage waits with a deadline and watches the processes, so a crash, a hang or a load
failure costs that case's row, never the run. After a crash or a hang the verifier and
the workers start again on fresh queues (``processes.py``).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..schema import CaseRow, Solution
from . import statuses, verifier, worker
from .processes import (
    GuardedQueue,
    Inbox,
    Process,
    context,
    failure,
    no_globals,
    spawn,
    stop,
    tensor_globals,
)
from .results import ResultWriter

if TYPE_CHECKING:
    from .scheduler import Job, Options


def digest(model) -> str:
    return hashlib.sha256(
        json.dumps(model.model_dump(mode="json"), sort_keys=True).encode()
    ).hexdigest()


@dataclass
class Lane:
    device: str
    options: Options
    writer: ResultWriter
    on_row: Callable[[CaseRow], None]
    solution_names: list[str] = field(default_factory=list)  # every solution this lane may run
    verdicts: Inbox | None = field(default=None, init=False)  # from the verifier
    control: Any = field(default=None, init=False)  # to the verifier
    data: dict[str, GuardedQueue] = field(default_factory=dict, init=False)  # worker -> verifier
    verifier_process: Process | None = field(default=None, init=False)
    workers: dict[str, Process] = field(default_factory=dict, init=False)
    serial: int = field(default=0, init=False)
    prepared: Job | None = field(default=None, init=False)
    prepared_reply: dict = field(default_factory=dict, init=False)

    # ------------------------------------------------------------------ processes

    def _log(self, name: str) -> Path:
        self.options.logs.mkdir(parents=True, exist_ok=True)
        return self.options.logs / f"{self.device.replace(':', '')}-{name}.log"

    def _start_verifier(self) -> None:
        """A verifier with fresh queues (a killed process can leave a queue broken): one
        from the scheduler, one to it, and one from each solution's worker. Workers still
        running hold the old queues, so they are stopped too."""
        self._retire_workers(set())
        self.verdicts, self.control = Inbox(), context.Queue()
        self.data = {name: GuardedQueue(tensor_globals) for name in self.solution_names}
        args = (
            self.device,
            self.control,
            self.data,
            self.verdicts.results,
            str(self.options.cache),
        )
        self.verifier_process = spawn(verifier.main, args, self._log("verifier"))
        self.verdicts.wait(lambda m: m["op"] == "hello", 300, [self.verifier_process])

    def _worker(self, job: Job, solution: Solution) -> Process:
        handle = self.workers.get(solution.name)
        if handle is not None and (handle.process.is_alive() or not handle.loaded.get("ok")):
            return handle  # running, or failed to load: a failed load is not retried per case
        inbox = Inbox(results=GuardedQueue(no_globals))
        commands = context.Queue()
        args = (
            self.device,
            commands,
            self.data[solution.name],
            inbox.results,
            job.definition.model_dump_json(),
            solution.model_dump_json(),
            str(self.options.cache),
        )
        log = self._log(f"worker-{hashlib.sha256(solution.name.encode()).hexdigest()[:10]}")
        handle = spawn(worker.main, args, log, commands)
        handle.inbox = inbox
        reply = inbox.wait(lambda m: m["op"] == "loaded", self.options.timeout, [handle])
        if isinstance(reply, dict):
            handle.loaded = reply
        else:  # a load that hangs is stopped, so that it holds nothing while others run
            handle.loaded = {"ok": False, "error": failure(reply, self.options.timeout)}
            stop(handle)
        self.workers[solution.name] = handle
        return handle

    def _stop_verifier(self) -> None:
        stop(self.verifier_process)
        self.verifier_process = None

    def close(self) -> None:
        self._retire_workers(set())
        if self.verifier_process is not None:
            self.control.put({"op": "exit"})
            self.verifier_process.process.join(timeout=10)
            self._stop_verifier()

    # ------------------------------------------------------------------ work

    def _prepare(self, job: Job) -> dict:
        """Pristine inputs and reference outputs of ``job`` in a live verifier. A reference
        that failed is not tried again for the job's other solutions."""
        if self.prepared is job and (
            self.verifier_process is not None or not self.prepared_reply.get("ok")
        ):
            return self.prepared_reply
        if self.verifier_process is None or not self.verifier_process.process.is_alive():
            self._start_verifier()
        self.control.put(
            {
                "op": "prepare",
                "definition": job.definition.model_dump_json(),
                "workload": job.workload.model_dump(mode="json"),
                "capture": job.capture.model_dump(mode="json") if job.capture else None,
                "data_root": str(self.options.data_root),
                "tolerance": job.task.tolerance.model_dump(),
                "canary": not self.options.validation_only,
            }
        )
        reply = self.verdicts.wait(
            lambda m: m["op"] == "prepared", self.options.reference_timeout, [self.verifier_process]
        )
        if not isinstance(reply, dict):
            error = "verifier: " + failure(reply, self.options.reference_timeout)
            self._stop_verifier()
            reply = {"ok": False, "status": statuses.REFERENCE_ERROR, "error": error}
        self.prepared, self.prepared_reply = job, reply
        return reply

    def _retire_workers(self, keep: set[str]) -> None:
        """Stop the workers of solutions the next job does not use (their memory goes too)."""
        for name in [name for name in self.workers if name not in keep]:
            handle = self.workers.pop(name)
            if handle.process.is_alive() and handle.commands is not None:
                handle.commands.put({"op": "exit"})
                handle.process.join(timeout=5)
            stop(handle)

    def run_job(self, job: Job) -> None:
        self._retire_workers({solution.name for solution in job.solutions})
        for solution in job.solutions:
            row = self._row(job, solution)
            started = time.monotonic()
            prepared = self._prepare(job)
            if not prepared.get("ok"):
                row.status, row.error = prepared["status"], prepared["error"]
            else:
                row.inputs, row.generator = prepared["inputs"], prepared["generator"]
                self._judge(job, solution, row)
            row.seconds = round(time.monotonic() - started, 3)
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

    def _judge(self, job: Job, solution: Solution, row: CaseRow) -> None:
        handle = self._worker(job, solution)
        if not handle.loaded.get("ok"):
            row.status, row.error = statuses.LOAD_FAILED, handle.loaded.get("error")
            return
        self.serial += 1
        case = f"{self.device}#{self.serial}"
        handle.inbox.early.clear()  # what is left belongs to cases that have ended
        self.verdicts.early.clear()
        timing = job.task.timing.model_dump()
        timing["cold_l2"] = self.options.cold_l2
        handle.commands.put(
            {
                "op": "case",
                "case_id": case,
                "workload": job.workload.model_dump(mode="json"),
                "capture": job.capture.model_dump(mode="json") if job.capture else None,
                "data_root": str(self.options.data_root),
                "timing": timing,
            }
        )
        watch = [handle, self.verifier_process]
        checked = self._stage(case, "checked", watch, row, handle)
        if checked is None:
            return
        if checked["status"] != "sent":
            row.status, row.error = checked["status"], checked.get("error")
            return
        verdict = self._verdict(case, "check", solution, watch, row, handle)
        if verdict is None:
            return
        row.outputs = {"call": verdict.get("outputs", {}).get("call", {})}
        if verdict["status"] != statuses.PASSED or self.options.validation_only:
            row.status, row.error = verdict["status"], verdict.get("error")
            handle.commands.put({"op": "skip"})
            return
        handle.commands.put({"op": "continue"})
        timed = self._stage(case, "timed", watch, row, handle)
        if timed is None:
            return
        row.timing = timed["timing"]
        verdict = self._verdict(case, "timed", solution, watch, row, handle)
        if verdict is None:
            return
        handle.commands.put({"op": "done"})
        row.outputs.update({k: v for k, v in verdict.get("outputs", {}).items() if k != "call"})
        if verdict["status"] != statuses.PASSED:
            row.status, row.error = verdict["status"], verdict.get("error")
        elif timed.get("error"):
            row.status = timed.get("status", statuses.TIMING_ERROR)
            row.error = timed["error"]
        elif any(isinstance(t, dict) and t.get("suspect") for t in row.timing.values()):
            row.status = statuses.TIMING_SUSPECT
            row.error = "the host waited far longer than the timed stream: work outside the timer"

    def _verdict(self, case: str, stage: str, solution: Solution, watch, row, handle):
        """Ask the verifier to check what the worker sent for ``stage``; its verdict."""
        self.control.put(
            {"op": "verify", "case_id": case, "stage": stage, "solution": solution.name}
        )
        return self._stage(case, "verified", watch, row, handle, self.verdicts)

    def _stage(
        self, case: str, op: str, watch, row: CaseRow, handle: Process, inbox: Inbox | None = None
    ) -> dict | None:
        """The message ``op`` of ``case``: from the worker, or from ``inbox`` (verdicts)."""
        outcome = (inbox or handle.inbox).wait(
            lambda m: m.get("case_id") == case and m["op"] == op, self.options.timeout, watch
        )
        if isinstance(outcome, dict):
            return outcome
        kind, process = outcome
        if process is self.verifier_process:
            row.status = statuses.REFERENCE_ERROR
            row.error = "verifier: " + failure(outcome, self.options.timeout)
        else:
            statuses_of = {"timeout": statuses.TIMEOUT, "refused": statuses.RUNTIME_ERROR}
            row.status = statuses_of.get(kind, statuses.CRASHED)
            row.error = failure(outcome, self.options.timeout)
        stop(handle)
        # The verifier may hold tensors of the dead worker, and the queues may be broken:
        # the next case starts a fresh verifier (and workers) on fresh queues.
        self._stop_verifier()
        return None
