"""What every command shares: the app, consoles, common options, dataset loading, errors."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..errors import DatasetError, close_names

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


def _device_value(value: str) -> str:
    """cpu, cuda or cuda:N (the commands that also take auto check it themselves)."""
    kind, _, index = value.partition(":")
    if value in ("cpu", "cuda", "auto") or (kind == "cuda" and index.isdigit()):
        return value
    raise typer.BadParameter(f"{value!r} is not cpu, cuda or cuda:N")


def _existing_folder(value: Path | None) -> Path | None:
    if value is not None and not value.is_dir():
        raise typer.BadParameter(f"{value}: no such folder")
    return value


DatasetOption = Annotated[
    Path | None,
    typer.Option(
        "--dataset",
        help="Dataset root (definitions/, workloads/, tasks/...). Default: "
        "$INFERENCE_KERNELS_DATASET, else ./dataset when it holds definitions/, else the "
        "dataset bundled with this checkout.",
    ),
]
DataRootOption = Annotated[
    Path | None,
    typer.Option(
        "--data-root",
        help="Where blob paths resolve; defaults to the dataset root.",
        callback=_existing_folder,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document for machines.")]
DefinitionOption = Annotated[
    list[str] | None, typer.Option("--definition", "-d", help="Only this definition (repeatable).")
]
WorkloadOption = Annotated[
    list[str] | None, typer.Option("--workload", "-w", help="Only this workload uuid (repeatable).")
]
DeviceOption = Annotated[str, typer.Option(help="cpu, cuda or cuda:N.", callback=_device_value)]
SuiteOption = Annotated[
    str,
    typer.Option(
        "--suite", help="first: smallest workload per definition; dev: the task's dev set; all."
    ),
]


def _load(dataset: Path | None):
    """The dataset at ``dataset`` (default: ``default_dataset()``); a folder that is no
    dataset (empty, or without definitions) is an error, not an empty success."""
    from ..dataset.layout import load_dataset

    root = dataset or default_dataset()
    if root.is_dir() and not any((root / "definitions").glob("**/*.json")):
        found = "is empty" if not any(root.iterdir()) else "has no definitions/*/*.json"
        _fail(f"{root}: not a dataset: it {found} (a FlashInfer Trace dataset has definitions/)")
    return load_dataset(root)


def _known(kind: str, name: str, known: Iterable[str]) -> None:
    """Fail with "did you mean" when ``name`` is not among ``known``."""
    known = sorted(known)
    if name in known:
        return
    close = close_names(name, known)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    _fail(f"no {kind} named {name!r}{hint}")


def _cases(dataset, definition, suite, workload):
    """The loaded dataset and the (definition, workload) pairs a command runs on."""
    from ..dataset.selection import select

    if suite not in ("first", "dev", "all"):
        _fail(f"--suite {suite!r} is not first, dev or all")
    try:
        loaded = _load(dataset)
        for name in definition or []:
            _known("definition", name, loaded.definitions)
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


def _json_wanted() -> bool:
    """Whether the running command was given --json (its ``as_json`` parameter)."""
    try:  # typer >= 0.29 vendors click; older typer uses click itself
        from typer._click.globals import get_current_context
    except ImportError:  # pragma: no cover
        from click import get_current_context
    context = get_current_context(silent=True)
    return bool(context and context.params.get("as_json"))


def _fail(message: str, code: int = 2) -> None:
    """One line on stderr (with --json: one JSON document on stdout), then exit ``code``:
    2 for a usage error, 1 for work that failed."""
    if _json_wanted():
        print(json.dumps({"error": message, "exit_code": code}))
    else:
        errors.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


class PlainProgress:
    """Progress off a terminal (logs, CI, agents): a plain line when work starts, then at
    most one every ``every`` seconds, and one at the end: done/total, the rate, the ETA
    and what is being worked on. The ETA is at the rate since the first line, so that a
    start-up (a lane's referee and preheat: 19 s before an audit's first 1 s case) does
    not stretch it. Implements the part of rich's Progress the commands use."""

    def __init__(self, every: float = 30.0, out=sys.stderr, clock=time.monotonic):
        self.every, self.out, self.clock = every, out, clock  # out None: silent
        self.tasks: dict[int, dict] = {}

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *_) -> None:
        for task in self.tasks.values():
            if task["done"] and task["printed"] != task["done"]:
                self._line(task)

    def add_task(self, description: str, total: float | None = None, **_) -> int:
        now = self.clock()
        self.tasks[len(self.tasks)] = {
            "description": description,
            "total": total,
            "done": 0,
            "started": now,
            "last": now - self.every,
            "printed": -1,
            "first": None,  # (time, done) at the first line with work done
        }
        return len(self.tasks) - 1

    def update(
        self, task_id: int, *, total=None, completed=None, description=None, advance=0, **_
    ) -> None:
        task = self.tasks[task_id]
        task["total"] = total if total is not None else task["total"]
        task["description"] = description or task["description"]
        before = task["done"]
        task["done"] = (completed if completed is not None else task["done"]) + advance
        finished = task["total"] is not None and task["done"] >= task["total"]
        moved = task["done"] != before
        if moved and (finished or self.clock() - task["last"] >= self.every):
            self._line(task)

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def _line(self, task: dict) -> None:
        if self.out is None:
            return
        now = self.clock()
        elapsed, done, total = now - task["started"], task["done"], task["total"]
        parts = [f"{task['description']}: {done}/{total if total is not None else '?'}"]
        if done:
            each = elapsed / done  # cases take seconds; fetch counts bytes
            parts.append(f"{each:.1f} s each" if each >= 0.1 else f"{done / elapsed:.3g}/s")
            first = task["first"] = task["first"] or (now, done)
            if total is not None and total > done and done > first[1]:
                steady = (now - first[0]) / (done - first[1])
                parts.append(f"ETA {_duration(steady * (total - done))}")
        parts.append(f"elapsed {_duration(elapsed)}")
        print(", ".join(parts), file=self.out, flush=True)
        task["last"], task["printed"] = now, done


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"


def _progress(transient: bool = True) -> Progress | PlainProgress:
    """A progress bar on a terminal; plain progress lines (stderr) elsewhere, none with
    --json (whose reader wants one document)."""
    if not errors.is_terminal:
        return PlainProgress(out=None if _json_wanted() else sys.stderr)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=errors,
        transient=transient,
    )
