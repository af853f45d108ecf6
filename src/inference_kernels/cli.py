"""The ``inference-kernels`` command: thin wrappers that parse arguments and call one function."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .errors import DatasetError

app = typer.Typer(
    help="Judge GPU inference kernels against independent references on real workloads.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
# Wide output when piped (logs, CI) so that tables do not wrap at 80 columns.
console = Console() if sys.stdout.isatty() else Console(width=160)
errors = Console(stderr=True)

BUNDLED = Path(__file__).resolve().parents[2] / "dataset"


def default_dataset() -> Path:
    """$INFERENCE_KERNELS_DATASET, else ./dataset, else the dataset bundled with the source."""
    if os.environ.get("INFERENCE_KERNELS_DATASET"):
        return Path(os.environ["INFERENCE_KERNELS_DATASET"])
    return Path("dataset") if Path("dataset/definitions").is_dir() else BUNDLED


DatasetOption = Annotated[
    Path | None,
    typer.Option("--dataset", help="Dataset root (definitions/, workloads/, tasks/...)."),
]
DataRootOption = Annotated[
    Path | None,
    typer.Option("--data-root", help="Where blob paths resolve; defaults to the dataset root."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document for machines.")]
DefinitionOption = Annotated[
    list[str] | None, typer.Option("--definition", "-d", help="Only this definition (repeatable).")
]
WorkloadOption = Annotated[
    list[str] | None, typer.Option("--workload", "-w", help="Only this workload uuid (repeatable).")
]
DeviceOption = Annotated[str, typer.Option(help="cpu, cuda or cuda:N.")]
SuiteOption = Annotated[
    str,
    typer.Option(
        "--suite", help="first: smallest workload per definition; dev: the task's dev set; all."
    ),
]


def _load(dataset: Path | None):
    from .dataset.layout import load_dataset

    return load_dataset(dataset or default_dataset())


def _cases(dataset, definition, suite, workload):
    """The loaded dataset and the (definition, workload) pairs a command runs on."""
    from .dataset.selection import select

    if suite not in ("first", "dev", "all"):
        _fail(f"--suite {suite!r} is not first, dev or all")
    try:
        loaded = _load(dataset)
        return loaded, select(loaded, definition, suite, workload)
    except DatasetError as error:
        _fail(str(error))


def _fail(message: str, code: int = 2) -> None:
    errors.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(code)


def _progress(transient: bool = True) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=errors,
        transient=transient,
        disable=not errors.is_terminal,
    )


@app.command()
def check(
    dataset: DatasetOption = None, data_root: DataRootOption = None, as_json: JsonOption = False
) -> None:
    """Validate a dataset: layout, schema, references, constraints, tasks, captures, blobs."""
    from .dataset.check import check_dataset

    try:
        loaded = _load(dataset)
        blob_total = sum(
            1
            for ws in loaded.workloads.values()
            for w in ws
            for d in w.inputs.values()
            if d.type == "safetensors"
        )
        with _progress() as progress:
            task = progress.add_task("verifying blobs", total=blob_total or None)
            report = check_dataset(loaded, data_root, lambda n: progress.advance(task, n))
    except DatasetError as error:
        _fail(str(error))
    if as_json:
        print(
            json.dumps(
                {
                    "dataset": str(loaded.root),
                    "ok": report.ok,
                    "counts": report.counts,
                    "problems": [vars(p) for p in report.problems],
                },
                indent=2,
            )
        )
    else:
        counts = ", ".join(f"{value} {key}" for key, value in report.counts.items())
        console.print(f"{loaded.root}: {counts}", highlight=False)
        for problem in report.problems:
            console.print(f"  [red]x[/red] {problem}", highlight=False)
        verdict = "ok" if report.ok else f"{len(report.problems)} problems"
        console.print(f"check: {verdict}", highlight=False)
    if not report.ok:
        raise typer.Exit(1)


@app.command()
def show(
    what: Annotated[str, typer.Argument(help="definitions, tasks or workloads")] = "definitions",
    dataset: DatasetOption = None,
    definition: DefinitionOption = None,
    as_json: JsonOption = False,
) -> None:
    """List definitions, tasks or workloads."""
    from .dataset.selection import input_bytes

    if what not in ("definitions", "tasks", "workloads"):
        _fail(f"show what? {what!r} is not definitions, tasks or workloads")
    try:
        loaded = _load(dataset)
        for name in definition or []:
            loaded.definition(name)
    except DatasetError as error:
        _fail(str(error))
    names = [n for n in sorted(loaded.definitions) if not definition or n in definition]
    rows: list[dict] = []
    for name in names:
        d = loaded.definitions[name]
        if what == "definitions":
            rows.append(
                {
                    "name": name,
                    "op_type": d.op_type,
                    "inputs": list(d.inputs),
                    "outputs": list(d.outputs),
                    "var_axes": d.var_axes(),
                    "workloads": len(loaded.workloads.get(name, [])),
                }
            )
        elif what == "tasks" and name in loaded.tasks:
            t = loaded.tasks[name]
            rows.append({"definition": name, **t.model_dump(exclude={"definition", "sources"})})
        elif what == "workloads":
            for w in loaded.workloads.get(name, []):
                kinds = sorted({desc.type for desc in w.inputs.values()})
                rows.append(
                    {
                        "definition": name,
                        "uuid": w.uuid,
                        "axes": w.axes,
                        "inputs": kinds,
                        "input_bytes": input_bytes(d, w),
                    }
                )
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(show_lines=False)
    for column in rows[0] if rows else []:
        table.add_column(column)
    for row in rows:
        table.add_row(*(_cell(value) for value in row.values()))
    console.print(table)
    console.print(f"{len(rows)} {what}", highlight=False)


def _cell(value: object) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k}={_cell(v)}" for k, v in value.items() if v is not None)
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) if len(value) <= 6 else f"{len(value)} items"
    return str(value)


@app.command()
def materialize(
    dataset: DatasetOption = None,
    data_root: DataRootOption = None,
    definition: DefinitionOption = None,
    workload: WorkloadOption = None,
    suite: SuiteOption = "first",
    device: DeviceOption = "cpu",
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write a dataset here whose selected workloads are safetensors blobs "
            "(stand-ins stay labelled as stand-ins in the blob metadata).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Turn workloads into input tensors; optionally write them into a blob store."""
    from .dataset.blobs import content_hash
    from .dtypes import dtype_name
    from .materialize import inputs as inputs_module
    from .materialize.export import export_dataset

    loaded, cases = _cases(dataset, definition, suite, workload)
    try:
        if output is not None:
            summary = export_dataset(loaded, cases, output, data_root)
            if as_json:
                print(json.dumps(summary, indent=2))
            else:
                console.print(
                    f"wrote {summary['blobs']} blobs for {summary['workloads']} workloads "
                    f"of {summary['definitions']} definitions into {output}",
                    highlight=False,
                )
            return
        rows = []
        with _progress() as progress:
            bar = progress.add_task("materializing", total=len(cases))
            for d, w in cases:
                made = inputs_module.materialize(
                    d,
                    w,
                    data_root=data_root or loaded.root,
                    device=device,
                    capture=loaded.captures.get(w.uuid),
                )
                tensors = {}
                for name, value in zip(made.names, made.values, strict=True):
                    if hasattr(value, "shape"):
                        tensors[name] = {
                            "shape": list(value.shape),
                            "dtype": dtype_name(value.dtype),
                            "origin": made.origins[name],
                            "sha256": content_hash(value),
                        }
                    else:
                        tensors[name] = {"value": value, "origin": made.origins[name]}
                rows.append(
                    {
                        "definition": d.name,
                        "uuid": w.uuid,
                        "inputs": made.origin,
                        "generator": made.generator,
                        "tensors": tensors,
                    }
                )
                progress.advance(bar)
    except DatasetError as error:
        _fail(str(error))
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        label = "STAND-IN" if row["inputs"] != "captured" else "captured"
        console.print(f"{row['definition']} {row['uuid']} [{label}]", highlight=False)
        for name, info in row["tensors"].items():
            detail = (
                f"{info['dtype']}{info['shape']} {info['sha256'][:12]}"
                if "shape" in info
                else f"= {info['value']}"
            )
            console.print(f"  {name:24s} {detail}  ({info['origin']})", highlight=False)


@app.command()
def reference(
    dataset: DatasetOption = None,
    data_root: DataRootOption = None,
    definition: DefinitionOption = None,
    workload: WorkloadOption = None,
    suite: SuiteOption = "first",
    device: DeviceOption = "cpu",
    report: Annotated[
        Path | None, typer.Option(help="Append one JSON line per case to this file.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Materialize workloads and run their references: finite outputs of the declared shapes?"""
    from .materialize.reference_runs import run_case

    loaded, cases = _cases(dataset, definition, suite, workload)
    runs = []
    stream = report.open("a") if report else None
    with _progress(transient=True) as progress:
        bar = progress.add_task("references", total=len(cases))
        for d, w in cases:
            progress.update(bar, description=d.name[:40])
            run = run_case(
                d,
                w,
                data_root=data_root or loaded.root,
                device=device,
                capture=loaded.captures.get(w.uuid),
            )
            runs.append(run)
            if stream:
                stream.write(json.dumps(run.to_dict()) + "\n")
                stream.flush()
            progress.advance(bar)
    if stream:
        stream.close()
    failed = [r for r in runs if r.status != "passed"]
    if as_json:
        print(json.dumps({"cases": [r.to_dict() for r in runs], "failed": len(failed)}, indent=2))
    else:
        _reference_table(runs)
    if failed:
        raise typer.Exit(1)


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
        typer.Option(help="A main.py defining run(), or a solution JSON, for one --definition."),
    ] = None,
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
    report: Annotated[Path | None, typer.Option(help="Write result rows (JSONL) here.")] = Path(
        "results/results.jsonl"
    ),
    resume: Annotated[
        bool, typer.Option(help="Keep the report's rows and run only the missing cases.")
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
    cache: Annotated[
        Path | None, typer.Option(help="Solution packages, reference outputs and worker logs.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Judge solutions on workloads: correctness under the task's tolerance, then timing."""
    import torch

    from .judge.session import Request, judge
    from .report.tables import solution_table

    if device not in ("cpu", "cuda", "auto"):
        _fail(f"--device {device!r} is not cpu, cuda or auto")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    suite = suite or ("dev" if device == "cuda" else "first")
    devices = ["cpu"]
    if device == "cuda":
        if not torch.cuda.is_available():
            _fail("--device cuda: no CUDA device is visible")
        indices = gpus.split(",") if gpus else [str(i) for i in range(torch.cuda.device_count())]
        devices = [f"cuda:{index.strip()}" for index in indices]
    loaded, _ = _cases(dataset, definition, suite, workload)
    request = Request(
        definitions=definition,
        solutions=solution,
        candidates=candidate or [],
        suite=suite,
        workloads=workload,
        devices=devices,
        report=report,
        resume=resume,
        validation_only=validation_only,
        cold_l2=cold_l2,
        timeout=timeout,
        data_root=data_root,
        cache=cache,
    )
    with _progress(transient=True) as progress:
        bar = progress.add_task("judging", total=None)

        def on_row(row) -> None:
            progress.advance(bar)
            if row.status != "passed" and not as_json:
                errors.print(
                    f"[red]{row.status}[/red] {row.definition} {row.solution} {row.uuid}: "
                    f"{row.error or ''}",
                    highlight=False,
                )

        try:
            rows = judge(loaded, request, on_row, lambda n: progress.update(bar, total=n))
        except DatasetError as error:
            _fail(str(error))
    baselines = {name: task.baseline for name, task in loaded.tasks.items() if task.baseline}
    table = solution_table(rows, baselines)
    failed = sum(sum(entry["failed"].values()) for entry in table)
    if as_json:
        print(
            json.dumps(
                {"report": str(report) if report else None, "failed": failed, "solutions": table},
                indent=2,
            )
        )
    else:
        _run_table(table)
        console.print(f"results: {report}" if report else "", highlight=False)
    if failed:
        raise typer.Exit(1)


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
        view.add_column(
            column, justify="right" if column in ("passed", "time us", "speedup") else "left"
        )
    for entry in table:
        failed = ", ".join(f"{k} {v}" for k, v in entry["failed"].items())
        view.add_row(
            entry["definition"],
            entry["solution"],
            "STAND-IN" if entry["inputs"] == "stand-in" else entry["inputs"],
            f"{entry['passed']}/{entry['cases']}",
            f"[red]{failed}[/red]" if failed else "",
            f"{entry['time_us']:.1f}" if entry["time_us"] else "-",
            entry["method"],
            f"{entry['speedup']:.2f}x" if entry["speedup"] else "-",
        )
    console.print(view)
    console.print(
        "Times: geometric mean over passed workloads, microseconds per call. Speedup: over the "
        "task's baseline on the same workloads. STAND-IN inputs are generated, not captured.",
        highlight=False,
    )


def _baselines(dataset: Path | None) -> dict[str, str]:
    try:
        loaded = _load(dataset)
    except DatasetError:
        return {}
    return {name: task.baseline for name, task in loaded.tasks.items() if task.baseline}


def _read(path: Path) -> list[dict]:
    from .report.rows import read_rows

    try:
        return read_rows(path)
    except DatasetError as error:
        _fail(str(error))


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
    from .report.compare import comparison

    rows = _read(first)
    other = _read(second) if second else None
    table = comparison(rows, other, _baselines(dataset), solution, against)
    if as_json:
        print(json.dumps(table, indent=2))
        return
    view = Table(title="paired speedups (old time / new time)")
    for column in ("definition", "solution", "against", "pairs", "speedup", "range", "faster"):
        view.add_column(column)
    for entry in table:
        speedup = f"{entry['speedup']:.3f}x" if entry["speedup"] else "-"
        spread = f"{entry['min']:.2f}-{entry['max']:.2f}" if entry["pairs"] else "-"
        view.add_row(
            entry["definition"],
            entry["solution"],
            entry["against"],
            str(entry["pairs"]),
            speedup,
            spread,
            f"{entry['faster']}/{entry['pairs']}",
        )
    console.print(view)


@app.command()
def summary(
    results: Annotated[Path, typer.Argument(help="Results file (JSONL).")],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Folder for summary.json and performance.md.")
    ] = Path("results"),
    dataset: DatasetOption = None,
    as_json: JsonOption = False,
) -> None:
    """Write summary.json (coverage, statuses, environment) and performance.md."""
    from .report.summary import performance_markdown
    from .report.summary import summary as summarize

    report = summarize(_read(results), _baselines(dataset))
    output.mkdir(parents=True, exist_ok=True)
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
    """Pick one measured solution per definition (preferred-solutions.json)."""
    from .report.summary import preferred as choose

    picked = choose(_read(results), _baselines(dataset))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(picked, indent=2) + "\n")
    if as_json:
        print(json.dumps(picked, indent=2))
    else:
        for entry in picked["definitions"]:
            console.print(
                f"{entry['definition']}: {entry['solution']} ({entry['time_us']:.1f} us)",
                highlight=False,
            )
        console.print(f"wrote {output}", highlight=False)


def _reference_table(runs) -> None:
    table = Table(title="reference runs")
    for column in ("definition", "axes", "inputs", "status", "make s", "ref s", "peak MiB"):
        table.add_column(column, justify="right" if column.endswith(("s", "MiB")) else "left")
    for r in runs:
        status = "[green]passed[/green]" if r.status == "passed" else f"[red]{r.status}[/red]"
        inputs = "STAND-IN" if r.inputs == "stand-in" else r.inputs
        table.add_row(
            r.definition,
            " ".join(f"{k}={v}" for k, v in r.axes.items()),
            inputs,
            status,
            f"{r.materialize_seconds:.2f}",
            f"{r.reference_seconds:.2f}",
            f"{r.peak_memory_bytes / 2**20:.0f}",
        )
    console.print(table)
    for r in runs:
        for problem in r.problems:
            console.print(f"[red]x[/red] {r.definition} {r.uuid}: {problem}", highlight=False)
    scope = runs[0].peak_memory_scope if runs else ""
    passed = sum(r.status == "passed" for r in runs)
    console.print(
        f"{passed}/{len(runs)} passed. Inputs labelled STAND-IN are generated, not captured. "
        f"Peak memory: {scope}.",
        highlight=False,
    )


def main() -> None:  # pragma: no cover - console entry for python -m
    sys.exit(app())


if __name__ == "__main__":  # pragma: no cover
    main()
