"""What every command shares: the app, consoles, common options, dataset loading, errors."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..errors import DatasetError

app = typer.Typer(
    help="Judge GPU inference kernels against independent references on real workloads.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
# Wide output when piped (logs, CI) so that tables do not wrap at 80 columns.
console = Console() if sys.stdout.isatty() else Console(width=160)
errors = Console(stderr=True)

BUNDLED = Path(__file__).resolve().parents[3] / "dataset"


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
    from ..dataset.layout import load_dataset

    return load_dataset(dataset or default_dataset())


def _cases(dataset, definition, suite, workload):
    """The loaded dataset and the (definition, workload) pairs a command runs on."""
    from ..dataset.selection import select

    if suite not in ("first", "dev", "all"):
        _fail(f"--suite {suite!r} is not first, dev or all")
    try:
        loaded = _load(dataset)
        return loaded, select(loaded, definition, suite, workload)
    except DatasetError as error:
        _fail(str(error))


def _writable(path: Path, *, folder: bool = False) -> None:
    """Fail in one line, before any work, when ``path`` cannot be written: a file whose
    place is a directory (or a folder whose place is a file), a parent that is a file, or
    a place the file system refuses (tried: a file opened for appending, and removed again
    when it was not there; in a folder, a temporary file)."""
    what = "folder" if folder else "file"
    if path.exists() and path.is_dir() != folder:
        _fail(f"{path}: is a {'file' if folder else 'directory'}, not a {what} to write")
    existing = path if folder else path.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        _fail(f"{path}: {existing} is a file, so no {what} can be written under it")
    try:
        if folder:
            path.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=path).close()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            existed = path.exists()
            with path.open("a"):
                pass
            if not existed:
                path.unlink()
    except OSError as error:
        _fail(f"{path}: cannot be written ({error.strerror or error})")


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
