"""Commands for kernel authors: new (a ready-to-edit solution)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import typer

from ..errors import DatasetError
from .common import DatasetOption, JsonOption, _fail, _known, _load, _writable, app, console


@app.command()
def new(
    definition: Annotated[str, typer.Option("--definition", "-d", help="The definition to solve.")],
    language: Annotated[
        str,
        typer.Option(
            help="python, triton (Python with @triton.jit), cuda (C++/CUDA, built with nvcc) "
            "or cpp (C++ for the CPU)."
        ),
    ] = "python",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="New folder (default: ./my_<definition>).")
    ] = None,
    author: Annotated[str, typer.Option(help="The solution's author field.")] = "me",
    dataset: DatasetOption = None,
    as_json: JsonOption = False,
) -> None:
    """Write a ready-to-edit solution: solution.json and its sources, with the definition's
    signature and every input's and output's shape and dtype in comments. Judge it with the
    command it prints (it fails until the kernel is written)."""
    from ..dataset.scaffold import LANGUAGES, write

    if language not in LANGUAGES:
        _fail(f"--language {language!r} is not one of {', '.join(LANGUAGES)}")
    try:
        loaded = _load(dataset)
    except DatasetError as error:
        _fail(str(error))
    _known("definition", definition, loaded.definitions)
    folder = output or Path(f"my_{definition}")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        _fail(f"{folder}: exists and is not an empty folder; give -o a new one")
    _writable(folder, folder=True)
    written = write(loaded.definitions[definition], language, folder, author)
    judge = ["inference-kernels", "run", "-d", definition, "--candidate", str(folder)]
    if dataset:
        judge[2:2] = ["--dataset", str(dataset)]
    # The report goes beside the folder, never into it: a candidate's files are pinned by
    # their hashes for the whole run (and rows written into it would change them).
    judge += ["--report", str(Path("results") / f"{folder.name}.jsonl"), "--overwrite"]
    command = shlex.join(judge)
    if as_json:
        print(json.dumps({"files": [str(p) for p in written], "judge": command}, indent=2))
        return
    for path in written:
        console.print(f"wrote {path}", highlight=False)
    console.print(f"edit {written[0]}, then judge it:", highlight=False)
    print(f"  {command}")  # one line whatever the terminal's width: it is copied and pasted
