"""A candidate solution from the author's files (``run --candidate PATH``).

PATH is one of:

- a Python file defining ``run`` (language python, outputs returned);
- a solution JSON in the FlashInfer Trace format, sources included;
- a folder holding ``solution.json`` whose ``sources`` may leave out ``content``: each
  such source is read from the file of that path in the folder, so an author edits the
  files and judges again (what ``inference-kernels new`` writes).

``name`` (``--name``) replaces the solution's name, so two candidates of one file name
can be told apart in the rows.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import DatasetError
from ..schema import Solution

MANIFEST = "solution.json"


def candidate_solution(path: Path, definition: str, name: str | None = None) -> Solution:
    """The solution at ``path`` for ``definition``; DatasetError names the file and field."""
    if path.is_dir():
        solution = _folder(path)
    elif not path.is_file():
        raise DatasetError(path, "", "no such file or folder")
    elif path.suffix == ".json":
        solution = _validated(path, path.read_text())
    else:
        solution = _python_file(path, definition)
    return solution.model_copy(update={"name": name}) if name else solution


def _validated(path: Path, text: str | dict) -> Solution:
    try:
        if isinstance(text, dict):
            return Solution.model_validate(text)
        return Solution.model_validate_json(text)
    except ValueError as error:
        message = str(error).splitlines()
        raise DatasetError(path, "", " ".join(m.strip() for m in message[:3])) from None


def _folder(folder: Path) -> Solution:
    manifest = folder / MANIFEST
    if not manifest.is_file():
        raise DatasetError(folder, MANIFEST, "a candidate folder needs a solution.json")
    try:
        data = json.loads(manifest.read_text())
    except json.JSONDecodeError as error:
        raise DatasetError(manifest, "", f"not JSON: {error}") from None
    sources = data.get("sources") if isinstance(data, dict) else None
    if not isinstance(sources, list):
        raise DatasetError(manifest, "sources", "a list of {path[, content]} is required")
    for index, source in enumerate(sources):
        if isinstance(source, dict) and "content" not in source and "path" in source:
            file = (folder / str(source["path"])).resolve()
            if not file.is_relative_to(folder.resolve()) or not file.is_file():
                raise DatasetError(manifest, f"sources[{index}].path", "no such file in the folder")
            source["content"] = file.read_text()
    return _validated(manifest, data)


def _python_file(path: Path, definition: str) -> Solution:
    return Solution.model_validate(
        {
            "name": f"candidate:{path.name}",
            "definition": definition,
            "author": "candidate",
            "description": f"Candidate from {path}",
            "spec": {
                "language": "python",
                "target_hardware": ["cpu", "cuda"],
                "entry_point": f"{path.name}::run",
                "destination_passing_style": False,
            },
            "sources": [{"path": path.name, "content": path.read_text()}],
        }
    )
