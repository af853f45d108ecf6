"""Load a solution: its sources written as a package, then its entry point imported.

The referee writes a solution's sources into a fresh folder for each worker it starts
(``write_package``: a path that would leave the folder is refused), which the worker's
sandbox shows read-only and nothing else does. The worker imports the entry module as
part of that package, so relative imports work (``load_package``); ``run`` and an
optional ``prepare(*inputs) -> launch`` are returned after their signatures are checked
against the definition.

Languages (docs/languages.md): ``python`` and ``triton`` are Python sources, imported as
above (a triton solution that cannot import triton fails to load, saying so). ``cpp`` and
``cuda`` sources (binding ``torch``, the default) are compiled, in the worker's sandbox, into
one PyTorch extension with ``torch.utils.cpp_extension.load``, as flashinfer-bench's torch
builder does: every .cpp/.cc/.cxx/.c/.cu source is compiled, the package folder is on the
include path, and the entry point ``kernel.cu::run`` names a source and the function the
extension exports (``PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }``).
A build is kept in a folder named by ``build_key`` (sources, spec, torch, compiler, flags),
which the referee prepares (workers.py) and the sandbox shows writable only to the worker
that builds it; a complete build is loaded again as it is, from a read-only folder.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import statuses
from ..schema import Definition, Solution


class SolutionLoadError(Exception):
    """The solution cannot be used for its definition; the message is one line."""

    status = statuses.LOAD_FAILED


class SolutionCompileError(SolutionLoadError):
    """The solution's sources did not compile; the message holds the compiler's first
    error lines."""

    status = statuses.COMPILE_ERROR


PYTHON_LANGUAGES = ("python", "triton")
COMPILED_LANGUAGES = ("cpp", "cuda")
# What flashinfer-bench's torch builder compiles; other sources (headers) are included.
COMPILED_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")
# The flags every build gets (part of the build key): host and device code optimized.
CFLAGS = ("-O3",)
CUDA_CFLAGS = ("-O3",)
BUILD_FORMAT = 1  # bump when the way builds are made or kept changes


@dataclass(frozen=True)
class Build:
    """Where a compiled solution is built (``folder``, named for its key), the name of its
    extension module, and whether a complete build is already there."""

    folder: Path
    name: str
    cached: bool

    def to_dict(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "name": self.name, "cached": self.cached}

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> Build:
        return cls(Path(value["folder"]), str(value["name"]), bool(value["cached"]))


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
    language = solution.spec.language
    if language not in PYTHON_LANGUAGES + COMPILED_LANGUAGES:
        raise SolutionLoadError(f"language {language!r} is not supported yet")
    if language in COMPILED_LANGUAGES:
        if solution.spec.binding == "tvm-ffi":
            raise SolutionLoadError("binding 'tvm-ffi' is not supported yet")
        file = solution.spec.entry_point.partition("::")[0]
        if not file.endswith(COMPILED_SUFFIXES):
            raise SolutionLoadError(
                f"the entry file of a {language} solution is one of its "
                f"{'/'.join(COMPILED_SUFFIXES)} sources, not {file!r}"
            )
        if language == "cpp" and any(s.path.endswith(".cu") for s in solution.sources):
            raise SolutionLoadError("a cpp solution has no .cu sources: its language is cuda")


def compiled(solution: Solution) -> bool:
    return solution.spec.language in COMPILED_LANGUAGES


@functools.cache
def _tool_version(tool: str) -> str:
    """The first line of ``tool --version`` (the compiler a build would use), or ''."""
    path = shutil.which(tool)
    if path is None:
        return ""
    try:
        result = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    return f"{os.path.realpath(path)}: {lines[0] if lines else ''} {lines[-1] if lines else ''}"


def build_key(solution: Solution, device: str = "cpu") -> str:
    """The key of a compiled solution's build: a hash of what the built extension depends
    on (its sources and spec, torch and Python, the compilers and flags, the GPU it is
    built for)."""
    import torch

    compilers = [_tool_version(os.environ.get("CXX", "c++"))]
    capability = None
    if solution.spec.language == "cuda":
        compilers.append(_tool_version("nvcc"))
        if device.startswith("cuda") and torch.cuda.is_available():
            capability = list(torch.cuda.get_device_capability(torch.device(device)))
    what = {
        "format": BUILD_FORMAT,
        "sources": sorted((s.path, s.content) for s in solution.sources),
        "spec": solution.spec.model_dump(mode="json"),
        "torch": [torch.__version__, torch.version.cuda, torch.version.git_version],
        "python": [sys.version, platform.machine()],
        "compilers": compilers,
        "flags": [CFLAGS, CUDA_CFLAGS, os.environ.get("TORCH_CUDA_ARCH_LIST")],
        "capability": capability,
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def extension_name(key: str) -> str:
    return f"ik_{key[:24]}"


def compiler_errors(output: str, lines: int = 10, limit: int = 800) -> str:
    """The compiler's first lines that report an error (else the end of its output), in
    one line of at most ``limit`` characters."""
    text = [" ".join(line.split()) for line in output.splitlines()]
    text = [line for line in text if line and not line.startswith("ninja: build stopped")]
    chosen = [line for line in text if "error:" in line.lower()]  # gcc, nvcc, ld
    chosen = chosen or [line for line in text if "error" in line.lower()] or text[-lines:]
    chosen = chosen[:lines]
    joined = " | ".join(chosen)
    return joined if len(joined) <= limit else joined[: limit - 3] + "..."


def _build_extension(solution: Solution, package: Path, build: Build) -> Any:
    """The solution's extension module: the complete build in ``build.folder`` if there is
    one, else built there now (SolutionCompileError when the sources do not compile)."""
    library = build.folder / f"{build.name}.so"
    if build.cached:
        spec = importlib.util.spec_from_file_location(build.name, library)
        if spec is None or not library.is_file():
            raise SolutionLoadError(f"the cached build {library.name} is missing")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as error:
            raise SolutionLoadError(
                f"loading the cached build failed: {type(error).__name__}: {error}"
            ) from None
        return module
    try:
        import ninja  # the build tool cpp_extension runs, from the judge's environment

        os.environ["PATH"] = f"{ninja.BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"
    except ImportError:
        pass
    from torch.utils import cpp_extension

    sources = [str(package / s.path) for s in solution.sources]
    sources = [path for path in sources if path.endswith(COMPILED_SUFFIXES)]
    cuda = solution.spec.language == "cuda"
    try:
        return cpp_extension.load(
            name=build.name,
            sources=sources,
            extra_cflags=list(CFLAGS),
            extra_cuda_cflags=list(CUDA_CFLAGS) if cuda else None,
            extra_include_paths=[str(package)],
            build_directory=str(build.folder),
            with_cuda=cuda,
            verbose=False,
        )
    except Exception as error:
        text = str(error)
        if text.startswith("Error building extension"):
            output = (text.partition(":")[2] or text).replace(f"{package}/", "")
            raise SolutionCompileError(f"the build failed: {compiler_errors(output)}") from None
        raise SolutionLoadError(
            f"building failed: {type(error).__name__}: {' '.join(text.split())[:800]}"
        ) from None


def load_package(
    solution: Solution, definition: Definition, package: Path, build: Build | None = None
) -> LoadedSolution:
    """Import the solution's entry point from ``package`` (a compiled solution's from its
    extension, built in ``build`` first unless complete there); raise SolutionLoadError
    (SolutionCompileError) with a one-line reason."""
    usable(solution, definition)
    file, _, symbol = solution.spec.entry_point.partition("::")
    if compiled(solution):
        if build is None:
            raise SolutionLoadError(f"no build folder for a {solution.spec.language} solution")
        module = _build_extension(solution, package, build)
        return _entry(solution, definition, module, file, symbol, package)
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
    return _entry(solution, definition, module, file, symbol, package)


def module_constants(run: Callable[..., Any]) -> dict[str, Any]:
    """The globals of a loaded Python or Triton solution's module (its entry point's, under
    any decorator), where its tuning constants are. For the tools that give them other
    values (the interpreter checks, the GPU's sweeps, the compile counts), never the judge."""
    return inspect.unwrap(run).__globals__


def set_constants(run: Callable[..., Any], settings: dict[str, Any], owner: str) -> None:
    """Give module constants of ``owner``'s solution (``run``'s module) other values, each
    converted to the type of the value it replaces ("64" for an int, "True" or "False" for
    a bool: bool("False") would be True); ValueError naming the first one the module does
    not have, or a bool's text that is neither."""
    constants = module_constants(run)
    for name, value in settings.items():
        if name not in constants:
            raise ValueError(f"{owner} has no module constant {name}")
        old = constants[name]
        if isinstance(old, bool) and isinstance(value, str):
            if value not in ("True", "False"):
                raise ValueError(f"{owner}'s {name} is True or False, not {value!r}")
            constants[name] = value == "True"
        else:
            constants[name] = type(old)(value)


def _entry(
    solution: Solution, definition: Definition, module: Any, file: str, symbol: str, package: Path
) -> LoadedSolution:
    run = getattr(module, symbol, None)
    if not callable(run):
        if compiled(solution):
            hint = ""
            if any("TVM_FFI_DLL_EXPORT" in s.content for s in solution.sources):
                hint = (
                    " (its sources export through TVM-FFI: binding 'tvm-ffi' is not supported yet)"
                )
            raise SolutionLoadError(
                f"the extension built from {file} exports no function {symbol!r}: "
                f"PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ m.def({symbol!r}, ...); }}{hint}"
            )
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
