"""Load a solution: its sources written as a package, then its entry point imported.

The referee writes a solution's sources into a fresh folder for each worker it starts
(``write_package``: a path that would leave the folder is refused), which the worker's
sandbox shows read-only and nothing else does. The worker imports the entry module as
part of that package, so relative imports work (``load_package``); ``run`` and an
optional ``prepare(*inputs) -> launch`` are returned after their signatures are checked
against the definition.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DatasetError
from ..schema import Definition, Solution


class SolutionLoadError(Exception):
    """The solution cannot be used for its definition; the message is one line."""


@dataclass
class LoadedSolution:
    run: Callable[..., Any]
    prepare: Callable[..., Callable[[], Any]] | None
    package: Path


def solution_hash(solution: Solution) -> str:
    canonical = json.dumps(solution.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def write_package(solution: Solution, package: Path) -> Path:
    """Write the sources into the new folder ``package`` (readable by the sandbox's user,
    0755/0644); return it."""
    package = package.resolve()
    package.mkdir(mode=0o755, parents=True)
    for source in solution.sources:
        target = (package / source.path).resolve()
        if not target.is_relative_to(package):
            raise SolutionLoadError(f"source path {source.path!r} escapes the package")
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        target.write_text(source.content)
    (package / "__init__.py").touch()
    for path in [package, *package.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return package


def candidate_solution(path: Path, definition: str) -> Solution:
    """A solution from a solution JSON, or from one Python file defining ``run``."""
    if not path.is_file():
        raise DatasetError(path, "", "no such file")
    if path.suffix == ".json":
        try:
            return Solution.model_validate_json(path.read_text())
        except ValueError as error:
            message = str(error).splitlines()
            raise DatasetError(path, "", " ".join(m.strip() for m in message[:3])) from None
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


def _arity_problem(function: Callable[..., Any], count: int, what: str) -> str | None:
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return None  # builtins and extension functions: nothing to inspect
    if any(p.kind == p.VAR_POSITIONAL for p in parameters):
        return None
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    if not len(required) <= count <= len(positional):
        return f"{what} takes {len(positional)} positional arguments, the definition passes {count}"
    return None


def usable(solution: Solution, definition: Definition) -> None:
    """Raise SolutionLoadError when the solution cannot be loaded for this definition."""
    if solution.definition != definition.name:
        raise SolutionLoadError(
            f"solution {solution.name!r} is for {solution.definition!r}, not {definition.name!r}"
        )
    if solution.spec.language != "python":
        raise SolutionLoadError(f"language {solution.spec.language!r} is not supported yet")


def load_package(solution: Solution, definition: Definition, package: Path) -> LoadedSolution:
    """Import the solution's entry point from ``package``; raise SolutionLoadError with a
    one-line reason."""
    usable(solution, definition)
    file, _, symbol = solution.spec.entry_point.partition("::")
    module_name = f"_ik_solution_{solution_hash(solution)[:16]}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            module_name, package / "__init__.py", submodule_search_locations=[str(package)]
        )
        parent = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = parent
        spec.loader.exec_module(parent)
    entry = f"{module_name}.{file.removesuffix('.py').replace('/', '.')}"
    try:
        module = importlib.import_module(entry)
    except Exception as error:
        raise SolutionLoadError(
            f"importing {file} failed: {type(error).__name__}: {error}"
        ) from None
    run = getattr(module, symbol, None)
    if not callable(run):
        raise SolutionLoadError(f"{file} defines no function {symbol!r}")
    count = len(definition.inputs)
    if solution.spec.destination_passing_style:
        count += len(definition.outputs)
    if problem := _arity_problem(run, count, symbol):
        raise SolutionLoadError(problem)
    prepare = getattr(module, "prepare", None)
    if prepare is not None and not callable(prepare):
        prepare = None
    if prepare is not None and (
        problem := _arity_problem(prepare, len(definition.inputs), "prepare")
    ):
        raise SolutionLoadError(problem)
    return LoadedSolution(run, prepare, package)
