"""A judging session: select cases, skip finished ones, write rows, run the lanes.

``judge`` is what ``inference-kernels run`` calls. Solutions come from the dataset's
``solutions/`` (all of the selected definitions' by default) and from ``--candidate``
files; a solution that cannot even be parsed still gets a failed row with a one-line
error, so that a results file always accounts for what was asked.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import schema, statuses
from ..dataset.layout import Dataset
from ..dataset.selection import Suite, select
from ..errors import DatasetError
from ..schema import CaseRow, Solution
from ..signing import key_folder
from .candidates import candidate_solution
from .manifest import Manifest
from .ray_backend import check_cluster, run_jobs_on_ray
from .results import Earlier, ResultWriter, digest, earlier_rows, environment_row
from .sandbox import Sandbox, bwrap_path, probe, record, repositories
from .scheduler import Job, Options, run_jobs


@dataclass
class Request:
    definitions: list[str] | None = None
    solutions: list[str] | None = None  # None: every solution of the definitions; []: none
    candidates: list[Path] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # the first candidates' names (--name)
    suite: Suite = "first"
    workloads: list[str] | None = None
    devices: list[str] = field(default_factory=lambda: ["cpu"])
    report: Path | None = None
    resume: bool = False
    validation_only: bool = False
    cold_l2: bool = False
    regime: str = "sustained"  # "burst": no preheat or load (referee.py)
    methods: tuple[str, ...] = schema.METHODS  # what is timed (schema.METHODS)
    kernel_times: bool = False  # each case's CUPTI kernel durations too (referee.py)
    timeout: float = 600.0
    data_root: Path | None = None
    cache: Path | None = None
    sandbox: bool = True  # False only with --no-sandbox: solutions then run unisolated
    # A Ray address (or "auto"): each workload is a Ray task on the cluster's nodes
    # (ray_backend.py), on a device of the type of ``devices`` ("cuda" or "cpu").
    ray: str | None = None

    def __post_init__(self) -> None:
        if self.regime not in schema.REGIMES:
            raise ValueError(f"regime {self.regime!r} is not one of {', '.join(schema.REGIMES)}")
        unknown = [m for m in self.methods if m not in schema.METHODS]
        if unknown or not self.methods:
            raise ValueError(f"methods {list(self.methods)} are not some of {list(schema.METHODS)}")
        if len(self.names) > len(self.candidates):
            raise ValueError(f"{len(self.names)} names for {len(self.candidates)} candidates")


class NoSandbox(Exception):
    """No sandbox can be made here, and the user did not ask to run without one."""


def default_cache() -> Path:
    return Path(tempfile.gettempdir()) / "inference-kernels-cache"


def make_sandbox(request: Request, dataset: Dataset, cache: Path) -> tuple[Sandbox | None, dict]:
    """The sandbox the workers run in, and the environment row's account of it."""
    if not request.sandbox:
        return None, record(None, "--no-sandbox: solutions ran unisolated")
    ok, description = probe(bwrap_path())
    if not ok:
        raise NoSandbox(
            f"no sandbox: {description}. Install bubblewrap (apt-get install bubblewrap), or "
            "pass --no-sandbox to run solutions unisolated (a solution can then change its own "
            "and others' verdicts)"
        )
    bundled = Path(__file__).resolve().parents[3] / "dataset"  # a source checkout's dataset
    secrets = [cache, key_folder(), dataset.root, bundled, *request.candidates]
    if request.data_root:
        secrets.append(request.data_root)
    if request.report:  # its folder: other reports in it are no business of a solution
        secrets.append(request.report.resolve().parent)
    secrets += repositories(secrets)  # else readable through git's objects
    return Sandbox(bwrap_path(), secrets), record(Sandbox(bwrap_path()), description)


def _device_type(request: Request) -> str:
    return "cuda" if any(d.startswith("cuda") for d in request.devices) else "cpu"


def runs_on(solution: Solution, device_type: str) -> bool:
    """Whether a dataset solution is judged by default on ``device_type``: on the CPU only
    those whose ``target_hardware`` names ``cpu`` (a Triton or CUDA kernel cannot run
    there); on a GPU all but those for the CPU alone. Named with ``-s``, a solution is
    judged wherever it is asked for."""
    targets = {target.lower() for target in solution.spec.target_hardware}
    if not targets:
        return True
    return "cpu" in targets if device_type == "cpu" else targets != {"cpu"}


def _solutions(dataset: Dataset, request: Request) -> tuple[list[Solution], list[CaseRow]]:
    """The selected solutions, and failed rows for those that cannot be parsed."""
    device_type = _device_type(request)
    chosen = [
        s
        for s in dataset.solutions.values()
        if (not request.definitions or s.definition in request.definitions)
        and (
            s.name in request.solutions
            if request.solutions is not None
            else runs_on(s, device_type)
        )
    ]
    failed = []
    for problem in dataset.problems:
        stem = Path(problem.file).stem
        if problem.file.startswith("solutions/") and (
            request.solutions is None or stem in request.solutions
        ):
            failed.append(_failed_row(request, stem, str(problem)))
    known = {s.name for s in dataset.solutions.values()}
    for index, path in enumerate(request.candidates):
        if not request.definitions or len(request.definitions) != 1:
            raise DatasetError(path, "--candidate", "needs exactly one --definition")
        name = request.names[index] if index < len(request.names) else None
        # A candidate that is refused gets its row under a name of the path (or --name),
        # never under the name its own file claims: that may be another solution's.
        refused = name or f"candidate:{path.name}"
        try:
            candidate = candidate_solution(path, request.definitions[0], name)
        except DatasetError as error:
            failed.append(_failed_row(request, refused, str(error)))
            continue
        problem = candidate_problem(candidate, request.definitions[0], known, chosen)
        if problem:
            failed.append(_failed_row(request, refused, f"{path}: {problem}"))
        else:
            chosen.append(candidate)
    for name in request.solutions or []:
        if name not in known and not any(row.solution == name for row in failed):
            failed.append(_failed_row(request, name, f"no solution named {name!r} in the dataset"))
    return chosen, failed


def candidate_problem(
    candidate: Solution, definition: str, known: set[str], chosen: list[Solution]
) -> str | None:
    """Why a candidate cannot be judged beside the others, or None. Rows are keyed by
    solution name: a candidate named like a dataset solution (selected or not) would write
    rows that read as that solution's, in this report and in any it is combined with."""
    if candidate.definition != definition:
        return f"solution {candidate.name!r} is for {candidate.definition!r}, not {definition!r}"
    if candidate.name in known:
        return f"{candidate.name!r} is the name of a dataset solution; rename it (or --name)"
    if any(s.name == candidate.name for s in chosen):
        return f"another candidate is named {candidate.name!r}; rename it (or --name)"
    return None


def _failed_row(request: Request, solution: str, error: str) -> CaseRow:
    definition = (
        request.definitions[0] if request.definitions and len(request.definitions) == 1 else "?"
    )
    return CaseRow(
        definition=definition,
        solution=solution,
        uuid=None,
        status=statuses.LOAD_FAILED,
        error=error,
    )


def judge(
    dataset: Dataset,
    request: Request,
    on_row: Callable[[CaseRow], None] = lambda r: None,
    on_plan: Callable[[int], None] = lambda n: None,
) -> list[dict]:
    """Judge the requested cases; returns the rows of the whole report (environment first),
    earlier rows included when resuming."""
    cache = (request.cache or default_cache()).resolve()
    sandbox, isolation = make_sandbox(request, dataset, cache)
    solutions, failed = _solutions(dataset, request)
    cases = select(dataset, request.definitions, request.suite, request.workloads)
    manifest = Manifest.of(dataset, {d.name for d, _ in cases}, request.candidates)
    pinned = manifest.hashes()
    earlier = earlier_rows(request.report) if request.resume and request.report else Earlier()
    _check_resumable(request, earlier, solutions, cases, dataset)
    recorded = (earlier.environment or {}).get("manifest")
    if recorded is not None and recorded != pinned:
        manifest.check(recorded, request.report)
    done = earlier.cases
    device_type = _device_type(request)
    if request.ray:  # before the report is touched: a cluster that is not there ends here
        check_cluster(request.ray, device_type)
    if request.report and not request.resume and request.report.exists():
        request.report.unlink()
    jobs = []
    for definition, workload in cases:
        wanted = [
            s
            for s in solutions
            if s.definition == definition.name
            and (definition.name, s.name, workload.uuid) not in done
        ]
        if wanted:
            jobs.append(
                Job(
                    definition,
                    workload,
                    dataset.tasks.get(definition.name) or _no_task(definition.name),
                    wanted,
                    dataset.captures.get(workload.uuid),
                    dataset.rooflines.get(definition.name),
                )
            )
    writer = ResultWriter(request.report)
    if request.ray:
        devices = [{"device": device_type, "ray": request.ray}]
    else:
        devices = [{"device": device} for device in request.devices]
    writer.write(
        environment_row(
            devices,
            dataset=str(dataset.root),
            resumed=bool(done) or earlier.environment is not None,
            suite=request.suite,
            validation_only=request.validation_only,
            regime=request.regime,
            methods=list(request.methods),
            kernel_times=request.kernel_times,
            isolation=isolation,
            manifest=pinned,
            dropped_rows=earlier.dropped,
        )
    )
    for row in failed:
        if (row.definition, row.solution, row.uuid) not in done:
            writer.write(row)
            on_row(row)
    on_plan(sum(len(job.solutions) for job in jobs))
    folder = cache / "runs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    options = Options(
        data_root=request.data_root or dataset.root,
        cache=cache,
        folder=folder,
        sandbox=sandbox,
        timeout=request.timeout,
        reference_timeout=max(request.timeout, 1800.0),
        validation_only=request.validation_only,
        cold_l2=request.cold_l2,
        regime=request.regime,
        methods=request.methods,
        kernel_times=request.kernel_times,
        device_type=device_type,
    )

    def unchanged() -> None:  # before each job: the pinned files did not change
        manifest.check(pinned, request.report or dataset.root)

    try:
        if request.ray:
            run_jobs_on_ray(jobs, request.ray, options, writer, on_row, unchanged)
        else:
            run_jobs(jobs, request.devices, options, writer, on_row, unchanged)
    finally:
        shutil.rmtree(folder / "packages", ignore_errors=True)
    return [*earlier.rows, *writer.rows]


def _check_resumable(request: Request, earlier: Earlier, solutions, cases, dataset) -> None:
    """Rows kept on resume must be what this run would write: same solution, definition
    and task (by hash), and timed unless the run is validation-only."""
    environment = earlier.environment
    if environment and environment.get("validation_only") and not request.validation_only:
        raise DatasetError(
            request.report,
            "validation_only",
            "its rows were judged without timing; resume with --validation-only, or write "
            "another --report",
        )
    if environment and environment.get("regime", "sustained") != request.regime:
        raise DatasetError(
            request.report,
            "regime",
            f"its rows were timed in the {environment.get('regime', 'sustained')} regime; "
            f"resume with --regime {environment.get('regime', 'sustained')}, or write "
            "another --report",
        )
    timed = environment.get("methods", list(schema.METHODS)) if environment else None
    if timed is not None and not request.validation_only and timed != list(request.methods):
        raise DatasetError(
            request.report,
            "methods",
            f"its rows timed {','.join(timed)}; resume with --methods {','.join(timed)}, or "
            "write another --report",
        )
    if not earlier.cases:
        return
    selected = {(definition.name, workload.uuid) for definition, workload in cases}
    solution_hashes = {solution.name: digest(solution) for solution in solutions}
    definition_hashes = {
        name: {"definition": digest(dataset.definitions[name]), "task": digest(dataset.tasks[name])}
        for name in {name for name, _ in selected}
        if name in dataset.tasks
    }
    for key, row in earlier.cases.items():
        definition_name, solution_name, uuid = key
        if (
            (definition_name, uuid) not in selected
            or solution_name not in solution_hashes
            or definition_name not in definition_hashes
        ):
            continue  # a row this run would not write again anyway
        wanted = {"solution": solution_hashes[solution_name], **definition_hashes[definition_name]}
        recorded = row.get("hashes", {})
        changed = [name for name, value in wanted.items() if recorded.get(name) != value]
        if changed:
            raise DatasetError(
                request.report,
                "hashes",
                f"{solution_name} on {uuid} was judged with another {' and '.join(changed)}; "
                "rerun without --resume, or write another --report",
            )


def _no_task(definition: str):
    raise DatasetError(
        f"tasks/{definition}.json", "", "missing: a definition needs a task to be judged"
    )
