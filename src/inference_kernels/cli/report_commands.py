"""The report command: one self-contained HTML page from one or more results files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..errors import DatasetError
from .common import DatasetOption, JsonOption, _fail, _load, _writable, app, console, errors
from .judge_commands import _read, task_baselines

PAGE = "index.html"


def _dataset(dataset: Path | None) -> tuple[dict, dict, dict]:
    """Task baselines, definitions (sizes in input bytes) and hardware tables (speed of
    light); without a dataset the page still comes, with no speedups and sizes from the
    rows' axes, after one warning."""
    try:
        loaded = _load(dataset)
    except DatasetError as error:
        errors.print(
            f"[yellow]warning:[/yellow] {escape(str(error))}: no task baselines, so no "
            "speedups; workload sizes from the rows' axes",
            highlight=False,
        )
        return {}, {}, {}
    return task_baselines(loaded), dict(loaded.definitions), dict(loaded.hardware)


@app.command()
def report(
    results: Annotated[
        list[Path],
        typer.Argument(
            help="Results files (JSONL), oldest first: a later file's row for the same "
            "definition, solution and workload replaces an earlier one."
        ),
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help=f"Folder for the page ({PAGE}).")
    ] = Path("results/report"),
    dataset: DatasetOption = None,
    as_json: JsonOption = False,
) -> None:
    """Write one HTML page, viewable offline: per definition, statuses with failure
    causes, per-workload times (eager, prepared, graph) with 95% intervals, speedups over
    the task baseline with their verdict, and plots."""
    from ..report.html import combine, counts, page
    from ..report.rows import case_rows

    _writable(output, folder=True)
    rows = combine([_read(path) for path in results])
    if not case_rows(rows):
        _fail(f"no signed case rows in {', '.join(str(path) for path in results)}")
    baselines, definitions, hardware = _dataset(dataset)
    target = output / PAGE
    replaced = target.exists()  # a page is made from its rows: made again, not merged
    sources = [str(path) for path in results]
    target.write_text(page(rows, baselines, definitions, sources, hardware))
    if as_json:
        print(json.dumps({"page": str(target), "replaced": replaced, **counts(rows)}, indent=2))
    else:
        verb = "replaced" if replaced else "wrote"
        console.print(f"{verb} {target}: {counts(rows)['cases']} cases", highlight=False)
