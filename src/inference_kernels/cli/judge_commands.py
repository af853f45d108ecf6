"""Judge and report commands: run, compare, summary, preferred."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from .. import schema
from ..errors import DatasetError
from ..report.sol import rates_label
from ..report.tables import (
    INDICATIVE_NOTE,
    INTERVAL_NOTE,
    STAND_IN_NOTE,
    inputs_label,
    method_label,
    passed_label,
    speedup_label,
    time_notes,
)
from .common import (
    DataRootOption,
    DatasetOption,
    DefinitionOption,
    JsonOption,
    WorkloadOption,
    _cases,
    _fail,
    _known,
    _load,
    _progress,
    _writable,
    app,
    console,
    errors,
)


def _exit_on_sigterm(*_) -> None:
    """A SIGTERM (a scheduler's time limit) unwinds like Ctrl-C, so the referee and worker
    processes are stopped with the run instead of holding the GPU after it. Later ones are
    ignored: GNU ``timeout`` signals the run and then its whole process group, and a second
    exit raised while the first unwinds prints a traceback."""
    signal.signal(signal.SIGTERM, lambda *_: None)
    sys.exit(143)


@app.command()
def run(
    dataset: DatasetOption = None,
    data_root: DataRootOption = None,
    definition: DefinitionOption = None,
    solution: Annotated[
        list[str] | None, typer.Option("--solution", "-s", help="Only this solution (repeatable).")
    ] = None,
    candidate: Annotated[
        list[Path] | None,
        typer.Option(
            help="Your solution, for one --definition (repeatable): a .py file defining run(), "
            "a solution JSON, or a folder with solution.json (what `new` writes). The "
            "definition's dataset solutions (its baseline) are judged with it."
        ),
    ] = None,
    name: Annotated[
        list[str] | None,
        typer.Option("--name", help="Name the candidates in the rows, in --candidate order."),
    ] = None,
    only_candidates: Annotated[
        bool,
        typer.Option("--only-candidates", help="Judge only the candidates, no dataset solution."),
    ] = False,
    suite: Annotated[
        str | None,
        typer.Option(help="first, dev or all (default: dev on CUDA, first on the CPU)."),
    ] = None,
    workload: WorkloadOption = None,
    device: Annotated[
        str, typer.Option(help="cpu, cuda, or auto (CUDA when there is a GPU).")
    ] = "auto",
    gpus: Annotated[
        str | None, typer.Option(help="CUDA devices to use, e.g. 0,1 (default: all).")
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            help="Judge on a Ray cluster (an address, or auto): each workload is a Ray task "
            "on one GPU (--device cuda) or one CPU of some node, in that node's sandbox; "
            "only this process writes and signs the report. The dataset (and --data-root) "
            "must be at the same path on every node, and the judge installed there in the "
            "same version; candidate files are read here and sent with the tasks. "
            "See docs/ray.md.",
        ),
    ] = None,
    report: Annotated[Path | None, typer.Option(help="Write result rows (JSONL) here.")] = Path(
        "results/results.jsonl"
    ),
    resume: Annotated[
        bool, typer.Option(help="Keep the report's rows and run only the missing cases.")
    ] = False,
    overwrite: Annotated[
        bool, typer.Option(help="Replace an existing report (without it, run refuses to).")
    ] = False,
    validation_only: Annotated[
        bool, typer.Option("--validation-only", help="Check correctness; skip timing.")
    ] = False,
    timeout: Annotated[
        float, typer.Option(help="Seconds a case may take before its worker is killed.")
    ] = 600.0,
    cold_l2: Annotated[
        bool, typer.Option("--cold-l2", help="Time single calls after flushing 2x the L2 size.")
    ] = False,
    regime: Annotated[
        str,
        typer.Option(
            help="The device state times are taken in. sustained: after a 10 s preheat the "
            "device is kept loaded between cases, the load stopped from each case's first "
            "call to its last sample (a busy server's clocks). burst: no load, a short "
            "rest before each case, samples as short as the outside check allows (the "
            "clocks of published micro-benchmarks and of ncu). Recorded in every row."
        ),
    ] = "sustained",
    methods: Annotated[
        str,
        typer.Option(
            help="What each case times, comma-separated: eager (plain calls), prepared (the "
            "solution's prepare() launches, when it has one), graph (a CUDA graph of its "
            "calls). An audit times only the graph: --methods graph (where a graph cannot "
            "be captured, and on the CPU, the plain calls are timed instead)."
        ),
    ] = ",".join(schema.METHODS),
    kernel_times: Annotated[
        bool,
        typer.Option(
            "--kernel-times",
            help="Also record each case's kernel durations from CUPTI (timing.kernels: one "
            "more eager sample under torch's profiler), the figure to hold against Nsight "
            "Compute. The worker is replaced after it, so that no later sample is timed in "
            "a process the profiler was in (about 3 s per case on the H200). Never ranked on.",
        ),
    ] = False,
    cache: Annotated[
        Path | None,
        typer.Option(help="Reference outputs (kept between runs), solution packages, logs."),
    ] = None,
    no_sandbox: Annotated[
        bool,
        typer.Option(
            "--no-sandbox",
            help="Run solutions without the bubblewrap sandbox. Only for code you trust: "
            "unisolated, a solution can read the references and rewrite any verdict.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Judge solutions on workloads: correctness under the task's tolerance, then timing.

    Every solution runs in a bubblewrap sandbox (see the README's threat model); without
    bwrap the run refuses to start unless --no-sandbox is given."""
    import torch

    from ..judge.ray_backend import RayUnavailable, cluster_has_gpus
    from ..judge.session import NoSandbox, Request, judge
    from ..report.failures import cause, grouped
    from ..report.tables import solution_table

    if report is not None:
        if report.is_file() and report.stat().st_size and not (resume or overwrite):
            _fail(f"{report} exists: --resume continues it, --overwrite replaces it")
        _writable(report)
    if device not in ("cpu", "cuda", "auto"):
        _fail(f"--device {device!r} is not cpu, cuda or auto")
    if timeout <= 0:
        _fail(f"--timeout {timeout}: a case needs a positive number of seconds")
    if regime not in schema.REGIMES:
        _fail(f"--regime {regime!r} is not one of {', '.join(schema.REGIMES)}")
    chosen = [m.strip() for m in methods.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in schema.METHODS]
    if unknown or not chosen:
        _fail(f"--methods {methods!r}: choose from {', '.join(schema.METHODS)}")
    if ray is not None and gpus is not None:
        _fail("--ray and --gpus exclude each other: Ray gives each task one GPU of some node")
    if ray is not None and device == "auto":  # the cluster's devices, not this host's
        try:
            device = "cuda" if cluster_has_gpus(ray) else "cpu"
        except RayUnavailable as error:
            _fail(str(error))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    suite = suite or ("dev" if device == "cuda" else "first")
    devices = ["cpu"]
    if ray is not None:
        devices = [device]  # the type; Ray picks the node and the GPU of each task
    elif device == "cuda":
        if not torch.cuda.is_available():
            _fail("--device cuda: no CUDA device is visible")
        indices = gpus.split(",") if gpus else [str(i) for i in range(torch.cuda.device_count())]
        devices = [f"cuda:{index.strip()}" for index in indices]
    loaded, _ = _cases(dataset, definition, suite, workload)
    _check_solutions(loaded, definition, solution, candidate or [], name or [], only_candidates)
    _outside_candidates(candidate or [], {"--report": report, "--cache": cache})
    request = Request(
        definitions=definition,
        solutions=[] if only_candidates else solution,
        candidates=candidate or [],
        names=name or [],
        suite=suite,
        workloads=workload,
        devices=devices,
        report=report,
        resume=resume,
        validation_only=validation_only,
        cold_l2=cold_l2,
        regime=regime,
        methods=tuple(m for m in schema.METHODS if m in chosen),
        kernel_times=kernel_times,
        timeout=timeout,
        data_root=data_root,
        cache=cache,
        sandbox=not no_sandbox,
        ray=ray,
    )
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    with _progress(transient=True) as progress:
        bar = progress.add_task("judging", total=None)

        seen: dict[tuple, int] = {}  # failure cause -> workloads it happened on

        def on_row(row) -> None:
            progress.update(bar, advance=1, description=f"judging {row.definition[:40]}")
            if row.status == "passed" or as_json:
                return
            key = cause(row.solution, row.status, row.error)
            seen[key] = seen.get(key, 0) + 1
            if seen[key] == 1:  # one message per cause; the count comes at the end
                # Names and errors are text a solution controls: never read as markup.
                where = escape(f"{row.definition} {row.solution} {row.uuid}: {row.error or ''}")
                errors.print(f"[red]{escape(row.status)}[/red] {where}", highlight=False)

        try:
            rows = judge(loaded, request, on_row, lambda n: progress.update(bar, total=n))
        except (DatasetError, NoSandbox, RayUnavailable) as error:
            _fail(str(error))
    environment = next((r for r in rows if r.get("type") == "environment"), {})
    if environment.get("dropped_rows"):
        errors.print(
            f"[yellow]warning:[/yellow] {report}: dropped {environment['dropped_rows']} earlier "
            "row(s) that fail authentication; their cases were judged again",
            highlight=False,
        )
    table = solution_table(rows, task_baselines(loaded))
    failed = sum(sum(entry["failed"].values()) for entry in table)
    failures = grouped(rows)
    if as_json:
        head = {"report": str(report) if report else None, "dataset": str(loaded.root)}
        head["failed"] = failed
        print(json.dumps({**head, "failures": failures, "solutions": table}, indent=2))
        if failed:
            raise typer.Exit(1)
        return
    for failure in failures:
        if len(failure["workloads"]) > 1:
            more = escape(f"{failure['solution']}: {failure['status']}")
            errors.print(
                f"{more} on {len(failure['workloads']) - 1} more workload(s), same cause",
                highlight=False,
            )
    _run_table(table)
    judged_on = f"dataset: {loaded.root}"  # the default may be the bundled one (--help)
    console.print(f"results: {report} ({judged_on})" if report else judged_on, highlight=False)
    if failed:
        raise typer.Exit(1)


def _check_solutions(loaded, definitions, solutions, candidates, names, only) -> None:
    """Usage errors of run's solution options, before any case runs."""
    known = set(loaded.solutions) | {
        Path(p.file).stem for p in loaded.problems if p.file.startswith("solutions/")
    }
    for solution in solutions or []:
        _known("solution", solution, known)
    if candidates and len(definitions or []) != 1:
        _fail("--candidate needs exactly one --definition (-d NAME)")
    for path in candidates:
        if not path.exists():
            _fail(f"--candidate {path}: no such file or folder")
    if len(names) > len(candidates):
        _fail(f"{len(names)} --name for {len(candidates)} --candidate")
    from ..judge.candidates import candidate_solution
    from ..judge.session import candidate_problem

    accepted = []
    for index, path in enumerate(candidates):  # what the judge would refuse, refused now
        name = names[index] if index < len(names) else None
        try:
            found = candidate_solution(path, definitions[0], name)
        except DatasetError as error:
            _fail(f"--candidate {error}")
        problem = candidate_problem(found, definitions[0], set(loaded.solutions), accepted)
        if problem:
            _fail(f"--candidate {path}: {problem}")
        accepted.append(found)
    if only and not candidates:
        _fail("--only-candidates needs a --candidate")
    if only and solutions:
        _fail("--only-candidates and --solution exclude each other")


def _outside_candidates(candidates: list[Path], outputs: dict[str, Path | None]) -> None:
    """A run writes nothing into a candidate folder: its files are pinned by their hashes
    for the whole run, so a report or cache there would stop it after its first rows."""
    folders = [c.resolve() for c in candidates if c.is_dir()]
    for option, path in outputs.items():
        if path is None:
            continue
        for folder in folders:
            if path.resolve().is_relative_to(folder):
                _fail(
                    f"{option} {path}: inside the candidate folder {folder}, whose files are "
                    "pinned for the run; write it elsewhere (e.g. results/)"
                )


def _run_table(table: list[dict]) -> None:
    view = Table(title="judged")
    for column in (
        "definition",
        "solution",
        "inputs",
        "passed",
        "failed",
        "time us",
        "method",
        "speedup",
    ):
        view.add_column(  # names fold rather than end in "…": a baseline and a candidate
            column,  # often share all but their last characters
            justify="right" if column in ("passed", "time us", "speedup") else "left",
            overflow="fold" if column in ("definition", "solution") else "ellipsis",
        )
    for entry in table:
        failed = ", ".join(f"{k} {v}" for k, v in entry["failed"].items())
        view.add_row(
            escape(entry["definition"]),
            escape(entry["solution"]),
            inputs_label(entry["inputs"]),
            passed_label(entry),
            f"[red]{escape(failed)}[/red]" if failed else "",
            f"{entry['time_us']:.1f}" if entry["time_us"] else "-",
            method_label(entry),
            speedup_label(entry["speedup"], entry["speedup_interval"], entry["significance"]),
        )
    console.print(view)
    console.print(
        "Times: geometric mean over passed workloads, microseconds per call. Speedup: over the "
        f"task's baseline on the same workloads. {INTERVAL_NOTE} {STAND_IN_NOTE}"
        + (f" {INDICATIVE_NOTE}" if any(e["indicative"] for e in table) else "")
        + "".join(f" {note}" for note in time_notes(table)),
        highlight=False,
    )


def _baselines(dataset: Path | None) -> dict[str, str]:
    return _tables(dataset)[0]


def _tables(dataset: Path | None) -> tuple[dict[str, str], dict, dict[str, str]]:
    """The dataset's task baselines, hardware tables and solution kinds (library path or
    ours; none where it does not load)."""
    from ..report.libraries import kinds

    try:
        loaded = _load(dataset)
    except DatasetError:
        return {}, {}, {}
    return task_baselines(loaded), dict(loaded.hardware), kinds(loaded.solutions.values())


def task_baselines(loaded) -> dict[str, str]:
    """Definition -> the name of its task's baseline solution."""
    return {name: task.baseline for name, task in loaded.tasks.items() if task.baseline}


def _read(path: Path) -> list[dict]:
    """The signed rows of ``path``; rows that fail their MAC are dropped, in one line."""
    from ..report.rows import dropped_note, read_rows

    try:
        rows, dropped = read_rows(path)
    except (DatasetError, ValueError) as error:  # ValueError: the key file names itself
        _fail(str(error))
    if dropped:
        errors.print(f"[yellow]warning:[/yellow] {dropped_note(path, dropped)}", highlight=False)
    if not any(row.get("type") == "case" for row in rows):
        _fail(f"{path}: holds no case rows signed by this judge")
    return rows


@app.command()
def compare(
    first: Annotated[Path, typer.Argument(help="Results file (JSONL) of the new run.")],
    second: Annotated[
        Path | None, typer.Argument(help="Results of an old run to compare against.")
    ] = None,
    solution: Annotated[str | None, typer.Option(help="Only this solution.")] = None,
    against: Annotated[
        str | None, typer.Option(help="Compare against this solution (default: the baseline).")
    ] = None,
    dataset: DatasetOption = None,
    as_json: JsonOption = False,
) -> None:
    """Paired per-workload speedups: geometric mean, range and count faster, by definition."""
    from ..report.compare import comparison

    rows = _read(first)
    other = _read(second) if second else None
    baselines, hardware, _ = _tables(dataset)
    table = comparison(rows, other, baselines, solution, against, hardware)
    if as_json:
        print(json.dumps(table, indent=2))
        return
    view = Table(title="paired speedups (old time / new time)")
    columns = (
        "definition",
        "solution",
        "against",
        "inputs",
        "regime",
        "pairs",
        "speedup",
        "range",
        "faster",
        "speed of light",
        "achieved",
    )
    for column in columns:
        view.add_column(column)
    for entry in table:
        speedup = speedup_label(entry["speedup"], entry["interval"], entry["verdict"])
        if entry["indicative"] and entry["speedup"]:
            speedup += " (indicative)"
        spread = f"{entry['min']:.2f}-{entry['max']:.2f}" if entry["pairs"] else "-"
        view.add_row(
            escape(entry["definition"]),
            escape(entry["solution"]),
            escape(entry["against"]),
            inputs_label(entry["inputs"]),
            entry["regime"],
            str(entry["pairs"]),
            speedup,
            spread,
            f"{entry['faster']}/{entry['pairs']}",
            _light(entry),
            f"{rates_label(entry)} / {rates_label(entry, 'against_')}",
        )
    console.print(view)
    notes = [INTERVAL_NOTE, STAND_IN_NOTE]
    if any(entry.get("sol_fraction") for entry in table):
        notes.append("Speed of light: each side's fraction on the paired workloads.")
    if any(entry["indicative"] for entry in table):
        notes.append(INDICATIVE_NOTE)
    console.print(" ".join(notes), highlight=False)


def _light(entry: dict) -> str:
    """Both sides' fractions of the speed of light, "new / against" ("-" where unknown)."""
    sides = (entry.get("sol_fraction"), entry.get("against_sol_fraction"))
    return " / ".join(f"{x:.2f}" if x else "-" for x in sides)


@app.command()
def summary(
    results: Annotated[Path, typer.Argument(help="Results file (JSONL).")],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Folder for summary.json and performance.md.")
    ] = Path("results"),
    dataset: DatasetOption = None,
    as_json: JsonOption = False,
) -> None:
    """Write summary.json (coverage, statuses, environment) and performance.md: per
    solution its time, speedup over the baseline and fraction of the speed of light (from
    the dataset's hardware table of the GPU the rows name)."""
    from ..report.summary import performance_markdown
    from ..report.summary import summary as summarize

    _writable(output, folder=True)
    report = summarize(_read(results), *_tables(dataset))
    (output / "summary.json").write_text(json.dumps(report, indent=2) + "\n")
    (output / "performance.md").write_text(performance_markdown(report))
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        console.print(
            f"wrote {output / 'summary.json'} and {output / 'performance.md'}: "
            f"{report['cases']} cases, {report['statuses']}",
            highlight=False,
        )


@app.command()
def preferred(
    results: Annotated[Path, typer.Argument(help="Results file (JSONL).")],
    output: Annotated[Path, typer.Option("--output", "-o")] = Path(
        "results/preferred-solutions.json"
    ),
    dataset: DatasetOption = None,
    as_json: JsonOption = False,
) -> None:
    """Pick one measured solution per definition (preferred-solutions.json): the fastest
    that passed every workload it ran, only when significantly faster than each other one
    (95% interval); none from CPU wall-clock times."""
    from ..report.summary import preferred as choose

    _writable(output)
    picked = choose(_read(results), _baselines(dataset))
    output.write_text(json.dumps(picked, indent=2) + "\n")
    if as_json:
        print(json.dumps(picked, indent=2))
    else:
        for entry in picked["definitions"]:
            console.print(
                escape(f"{entry['definition']}: {entry['solution']} ({entry['time_us']:.1f} us, ")
                + f"{inputs_label(entry['inputs'])} inputs)",
                highlight=False,
            )
        for entry in picked["undecided"]:
            console.print(
                escape(f"{entry['definition']}: none preferred ({entry['reason']})"),
                highlight=False,
            )
        console.print(f"wrote {output}", highlight=False)
        if picked["device"] is None:
            console.print(
                "the rows name no one GPU model: this file cannot be a dataset's "
                "preferred/<gpu>.json",
                highlight=False,
            )
