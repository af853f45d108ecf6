"""The fetch command: the published dataset's metadata and the tensors a selection needs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import typer

from ..dataset.fetch import DEFAULT_INTO, DEFAULT_REPO, DEFAULT_REVISION
from ..errors import DatasetError
from .common import (
    DefinitionOption,
    JsonOption,
    SuiteOption,
    _fail,
    _progress,
    _writable,
    app,
    console,
)


@app.command("fetch")
def fetch_command(
    definition: DefinitionOption = None,
    suite: SuiteOption = "dev",
    into: Annotated[
        Path, typer.Option("--into", help="The folder to fetch into; it becomes a dataset root.")
    ] = DEFAULT_INTO,
    revision: Annotated[
        str,
        typer.Option(
            help="Branch, tag or commit sha. A sha pins the fetch; the commit fetched is "
            "recorded in FETCHED.json in the folder either way."
        ),
    ] = DEFAULT_REVISION,
    repo: Annotated[str, typer.Option(help="The Hugging Face dataset repository.")] = DEFAULT_REPO,
    endpoint: Annotated[
        str | None,
        typer.Option(help="The hub's URL (default: $HF_ENDPOINT, else https://huggingface.co)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Download the dataset's metadata and the tensors of the selected workloads (their
    inputs, and the engine outputs of captured ones), checking every file's hash on arrival.
    Files already there are not downloaded again."""
    from ..dataset.fetch import FetchError, fetch

    if suite not in ("first", "dev", "all"):
        _fail(f"--suite {suite!r} is not first, dev or all")
    _writable(into, folder=True)
    with _progress(transient=True) as progress:
        bar = progress.add_task("fetch", total=None)

        def report(what: str, done: int, total: int) -> None:
            progress.update(bar, description=what, completed=done, total=total or None)

        try:
            fetched = fetch(repo, revision, into, definition, suite, endpoint, progress=report)
        except (FetchError, DatasetError) as error:
            _fail(str(error))
    command = ["inference-kernels", "run", "--dataset", str(into)]
    for name in definition or []:
        command += ["-d", name]
    command += ["--suite", suite]
    usage = shlex.join(command)
    if as_json:
        summary = {
            "repo": fetched.repo,
            "revision": revision,
            "commit": fetched.commit,
            "into": str(into),
            "suite": suite,
            "definitions": fetched.definitions,
            "workloads": fetched.workloads,
            "metadata_files": fetched.metadata_files,
            "tensor_files": fetched.tensor_files,
            "bytes": fetched.bytes,
            "next": usage,
        }
        print(json.dumps(summary, indent=2))
        return
    console.print(
        f"{fetched.repo}@{fetched.commit} in {into}: {fetched.metadata_files} metadata files, "
        f"{fetched.tensor_files} tensor files ({fetched.bytes / 1e6:.1f} MB, hashes checked) "
        f"for {fetched.workloads} workloads of {len(fetched.definitions)} definitions "
        f"(suite {suite})",
        highlight=False,
    )
    console.print(f"next: {usage}", highlight=False)
