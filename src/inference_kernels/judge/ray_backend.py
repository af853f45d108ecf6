"""Judge the jobs as Ray tasks across the hosts of a Ray cluster (``run --ray ADDRESS``).

``run_jobs_on_ray`` has the contract of ``scheduler.run_jobs``: every job (one workload
and its solutions) becomes one Ray task, which runs the same lane code (``lane.py``) on
the node it lands on, for that node's device: under ``num_gpus=1`` the GPU Ray assigned
(``cuda:0`` under the ``CUDA_VISIBLE_DEVICES`` Ray sets), under ``num_cpus=1`` the CPU.
The lane starts the node's referee, which starts the sandboxed workers: a node isolates
solutions exactly as a single host does (the sandbox is made on the node, from the
driver's list of paths to hide and the node's own key folder).

A task ships by value what it judges (the job's pydantic models as JSON, the options)
and returns its rows as dicts; it never writes the report and holds no key of the
judge's. The driver (this process) validates each returned row, signs it through the
real ``ResultWriter`` and calls ``on_row``, as tasks complete, so the report grows while
the run goes. Exactly once: a task whose node or worker died is run again by Ray
(``RETRIES``); its rows come back only when it completes, and the driver writes each
(definition, solution, uuid) once, so a task run twice (a retry, or a re-execution of a
result lost with its node) cannot write a case twice. A case whose task fails for good
gets a failed row naming the Ray failure. ``--resume`` needs nothing here: the session
schedules only the cases the report lacks.

Nodes read the dataset (and ``--data-root``) at the driver's paths: a shared file
system, or the same copy at the same path on every host. The judge's package must be
installed on every node, in the same version.

On the node, one lane is kept per Ray worker process and serves that process's next
tasks (its referee and workers stay up between workloads, as a lane of ``run_jobs``
does); a watchdog process kills the lane's referee and its workers, and removes its
solution packages, when the Ray worker dies without closing it (a node or the driver
gone, a task cancelled).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .. import statuses
from ..schema import CaptureRecord, CaseRow, Definition, Roofline, Solution, Task, Workload
from ..signing import key_folder
from .lane import Lane
from .results import Case, ResultWriter, digest
from .sandbox import Sandbox, bwrap_path, probe
from .scheduler import Job, Options

RETRIES = 3  # runs of a task after the first, when its worker or node dies
log = logging.getLogger(__name__)


class RayUnavailable(Exception):
    """Ray is not installed, or no cluster answers at the address, or it lacks devices."""


class NoSandboxOnNode(Exception):
    """A node cannot make the sandbox the run asked for (its cases fail, with this)."""


# ---------------------------------------------------------------------------- driver


def connect(address: str):
    """The ``ray`` module, connected to the cluster at ``address`` (or ``auto``)."""
    try:
        import ray
    except ImportError:
        raise RayUnavailable(
            "--ray needs Ray on this host and on every node: pip install 'inference-kernels[ray]'"
        ) from None
    try:
        ray.init(
            address=address,
            ignore_reinit_error=True,
            logging_level=logging.WARNING,
            log_to_driver=False,  # a referee logs to its file; failures come back as errors
        )
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise RayUnavailable(f"--ray {address}: {' '.join(str(error).split())[:300]}") from None
    return ray


def cluster_has_gpus(address: str) -> bool:
    """Whether the Ray cluster at ``address`` has a GPU (``run --ray --device auto``)."""
    return bool(connect(address).cluster_resources().get("GPU"))


def check_cluster(address: str, device_type: str) -> None:
    """Connect to the cluster; RayUnavailable unless it has a device of ``device_type``
    (tasks that no node can take would wait for ever)."""
    resource = "GPU" if device_type == "cuda" else "CPU"
    if not connect(address).cluster_resources().get(resource):
        raise RayUnavailable(f"--ray {address}: the cluster has no {resource}")


def run_jobs_on_ray(
    jobs: list[Job],
    address: str,
    options: Options,
    writer: ResultWriter,
    on_row: Callable[[CaseRow], None] = lambda row: None,
    before_job: Callable[[], None] = lambda: None,
) -> None:
    """Judge every job as a Ray task on the cluster at ``address``; rows are written (and
    signed) here only. ``before_job`` runs here before each task is submitted; tasks are
    submitted as the cluster has room for them, so that it runs close to the job's start.
    An error of ``before_job`` stops submitting: the running tasks finish, their rows are
    written, then it is raised. An error writing a row cancels the running tasks."""
    check_cluster(address, options.device_type)
    ray = connect(address)
    cuda = options.device_type == "cuda"
    resource = "GPU" if cuda else "CPU"
    resources = {"num_gpus": 1} if cuda else {"num_cpus": 1}
    remote = ray.remote(max_retries=RETRIES, retry_exceptions=False, **resources)(judge_on_node)
    pending = list(jobs)
    running: dict[Any, Job] = {}
    written: set[Case] = set()
    stopped: BaseException | None = None

    def submit() -> None:
        nonlocal stopped
        room = max(1, int(ray.cluster_resources().get(resource, 0)))
        while pending and stopped is None and len(running) < room:
            try:
                before_job()
            except BaseException as error:
                stopped = error
                pending.clear()
                return
            job = pending.pop(0)
            name = f"judge {job.definition.name} {job.workload.uuid}"
            running[remote.options(name=name).remote(_spec(job), options)] = job

    try:
        submit()
        while running:
            ready, _ = ray.wait(list(running), num_returns=1)
            for ref in ready:
                job = running.pop(ref)
                try:
                    result, failure = ray.get(ref), None
                except ray.exceptions.RayError as error:
                    result, failure = None, _why(error)
                for row in _rows(job, result, failure, written):
                    writer.write(row)
                    written.add((row.definition, row.solution, row.uuid))
                    on_row(row)
            submit()
    except BaseException:
        for ref in running:
            ray.cancel(ref, force=True)
        raise
    if stopped is not None:
        raise stopped


def _spec(job: Job) -> dict[str, Any]:
    """What a task needs of its job, by value (the models as JSON)."""
    return {
        "definition": job.definition.model_dump_json(),
        "workload": job.workload.model_dump_json(),
        "task": job.task.model_dump_json(),
        "solutions": [solution.model_dump_json() for solution in job.solutions],
        "capture": job.capture.model_dump_json() if job.capture else None,
        "roofline": job.roofline.model_dump_json() if job.roofline else None,
    }


def _job(spec: dict[str, Any]) -> Job:
    return Job(
        Definition.model_validate_json(spec["definition"]),
        Workload.model_validate_json(spec["workload"]),
        Task.model_validate_json(spec["task"]),
        [Solution.model_validate_json(text) for text in spec["solutions"]],
        CaptureRecord.model_validate_json(spec["capture"]) if spec["capture"] else None,
        Roofline.model_validate_json(spec["roofline"]) if spec.get("roofline") else None,
    )


def _why(error: BaseException) -> str:
    """One line on a task that failed for good: the task's own error, or Ray's."""
    cause = getattr(error, "cause", None)  # RayTaskError: what the task raised
    if isinstance(cause, BaseException):
        said = f"the task raised {type(cause).__name__}: {cause}"
    else:
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        said = f"{type(error).__name__}: {first}".rstrip(": ")
    return " ".join(f"ray: {said} (after up to {RETRIES} retries)".split())[:800]


def _rows(
    job: Job, result: dict[str, Any] | None, failure: str | None, written: set[Case]
) -> list[CaseRow]:
    """The rows of a finished task, one per case of the job not yet written: the node's
    (validated, and only for cases of this job), and failed rows for the cases it did not
    return."""
    wanted = {(job.definition.name, s.name, job.workload.uuid): s for s in job.solutions}
    rows: dict[Case, CaseRow] = {}
    if result is not None:
        for data in result.get("rows", []):
            try:
                row = CaseRow.model_validate({k: v for k, v in data.items() if k != "mac"})
            except (ValidationError, AttributeError) as error:
                log.warning("dropped a row from node %s: %s", result.get("node"), error)
                continue
            case = (row.definition, row.solution, row.uuid)
            if case in wanted and case not in rows:
                rows[case] = row
        log.info(
            "%s: %d case(s) judged on node %s (%s)",
            job.workload.uuid,
            len(rows),
            result.get("node"),
            result.get("host"),
            extra={"node": result.get("node"), "host": result.get("host")},
        )
    for case, solution in wanted.items():
        if case not in rows:
            rows[case] = CaseRow(
                definition=job.definition.name,
                solution=solution.name,
                uuid=job.workload.uuid,
                status=statuses.REFERENCE_ERROR,
                error=failure or "ray: the task returned no row for this case",
                axes=job.workload.axes,
                hashes={
                    "solution": digest(solution),
                    "definition": digest(job.definition),
                    "task": digest(job.task),
                },
            )
    return [row for case, row in rows.items() if case not in written]


# ------------------------------------------------------------------------------ node


class RowCollector:
    """The node's writer: keeps the lane's rows in memory, unsigned, for the driver."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def write(self, row: CaseRow) -> None:
        self.rows.append(row.model_dump(mode="json", exclude_none=True))


@dataclass
class _Held:
    """The lane a Ray worker process keeps between tasks, and what it was made for."""

    made_for: tuple[Options, str | None]
    lane: Lane
    watchdog: int | None  # its pid

    def close(self) -> None:
        try:
            self.lane.close()
        finally:
            shutil.rmtree(self.lane.options.folder / "packages", ignore_errors=True)
            if self.watchdog is not None:
                try:
                    os.kill(self.watchdog, signal.SIGKILL)
                except OSError:
                    pass


_held: _Held | None = None


def judge_on_node(spec: dict[str, Any], options: Options) -> dict[str, Any]:
    """The Ray task: judge one job with this worker's lane; the rows, as dicts."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    job = _job(spec)
    lane = _lane(options, node)
    collector = RowCollector()
    lane.writer = collector
    try:
        lane.run_job(job)
    except BaseException:
        _release()
        raise
    return {"node": node, "host": socket.gethostname(), "rows": collector.rows}


def _release() -> None:
    global _held
    held, _held = _held, None
    if held is not None:
        held.close()


def _lane(options: Options, node: str) -> Lane:
    """This worker's lane for ``options`` on the device Ray gave the task: the one kept
    from an earlier task when made for the same, else a new one."""
    global _held
    made_for = (options, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if _held is not None and _held.made_for == made_for:
        return _held.lane
    _release()
    local = _node_options(options, node)
    device = "cuda:0" if options.device_type == "cuda" else "cpu"
    name = f"{device}-{node[:12]}-{os.getpid()}"
    lane = Lane(device, local, RowCollector(), lambda row: None, name)
    _held = _Held(made_for, lane, _watchdog(local.folder))
    return lane


def _node_options(options: Options, node: str) -> Options:
    """The options as this node runs them: its own folder for the lane's packages and
    logs, and the sandbox made here (this node's bwrap, and its key folder hidden too:
    the referee signs its reference cache with this node's key)."""
    folder = options.folder / "ray" / f"{node[:12]}-{os.getpid()}"
    sandbox = options.sandbox
    if sandbox is not None:
        bwrap = bwrap_path()
        ok, description = probe(bwrap)
        if not ok:
            raise NoSandboxOnNode(f"host {socket.gethostname()}: no sandbox: {description}")
        sandbox = Sandbox(bwrap, [*sandbox.secrets, key_folder(), options.cache])
    return replace(options, folder=folder, sandbox=sandbox)


WATCHDOG = r"""
import os, shutil, signal, sys, time
parent, folder = int(sys.argv[1]), sys.argv[2]
def started(pid):
    try:
        with open(f"/proc/{pid}/stat") as stream:
            fields = stream.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if len(fields) < 20 or fields[0] in "ZX" else fields[19]
birth = started(parent)
if os.fork():  # the watchdog is the grandchild: no child of the worker, which Ray may kill
    os._exit(0)
me = os.getpid()
print(me, flush=True)
os.close(1)
def below(root):
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as stream:
                    ppid = int(stream.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(name))
    found, pending = [], [root]
    while pending:
        for child in children.get(pending.pop(), []):
            if child != me:
                found.append(child)
                pending.append(child)
    return found
known = []
while birth is not None and started(parent) == birth:
    known = below(parent)
    time.sleep(1)
for pid in known:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
shutil.rmtree(os.path.join(folder, "packages"), ignore_errors=True)
"""


def _watchdog(folder: Path) -> int | None:
    """A process that outlives this Ray worker (its pid): when the worker dies (it cannot
    close its lane then), it kills the processes that were below it (the referee; the
    sandboxed workers die with it) and removes the lane's solution packages. Neither a
    child of the worker nor in its process group: Ray kills those with the worker."""
    launcher = subprocess.Popen(
        [sys.executable, "-I", "-c", WATCHDOG, str(os.getpid()), str(folder)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    said, _ = launcher.communicate(timeout=60)
    return int(said) if said.strip().isdigit() else None
