"""Materialize one workload and run its reference: the record of what happened.

Used by ``inference-kernels reference`` to show that every selected workload
materializes and that its reference returns finite outputs of the declared shapes and
dtypes, with time and peak memory; and by ``inference-kernels replay``, which also
compares the reference with the engine output a capture kept, under the task's
tolerance.
"""

from __future__ import annotations

import gc
import resource
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..acceptance import compare
from ..dataset.receipts import engine_outputs, load_engine_output
from ..dtypes import dtype_name
from ..errors import DatasetError
from ..schema import CaptureRecord, Definition, Tolerance, Workload
from .inputs import Materialized, materialize
from .references import ambiguous_rows, output_problems, run_reference


@dataclass
class ReferenceRun:
    definition: str
    uuid: str
    axes: dict[str, int]
    device: str
    status: str = "passed"
    inputs: str = ""  # captured, stand-in or mixed
    generator: str | None = None
    input_bytes: int = 0
    materialize_seconds: float = 0.0
    reference_seconds: float = 0.0
    keep_seconds: float = 0.0  # storing the outputs in the judge's cache (``keep``)
    peak_memory_bytes: int = 0
    peak_memory_scope: str = ""
    outputs: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    engine_output: str = ""  # replay: "compared", or why there was nothing to compare

    def to_dict(self) -> dict:
        return asdict(self)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_case(
    definition: Definition,
    workload: Workload,
    *,
    data_root: Path,
    device: str,
    capture: CaptureRecord | None = None,
    tolerance: Tolerance | None = None,
    keep: Callable[[list[torch.Tensor]], None] | None = None,
    made: Materialized | None = None,
) -> ReferenceRun:
    """With ``tolerance``, the reference outputs are also compared with the engine outputs
    the capture record names (a replay). ``keep`` receives outputs that passed (the judge's
    reference cache, filled ahead of a run). ``made``: the workload's inputs, made ahead on
    the CPU (judge/reference_fill.py); they go to the device here."""
    target = torch.device(device)
    run = ReferenceRun(definition.name, workload.uuid, dict(workload.axes), str(target))
    if target.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(target)
    try:
        started = time.perf_counter()
        if made is not None:
            inputs = made.to(target)
        else:
            inputs = materialize(
                definition, workload, data_root=data_root, device=target, capture=capture
            )
        _synchronize(target)
        run.materialize_seconds = time.perf_counter() - started
        run.inputs, run.generator, run.input_bytes = (
            inputs.origin,
            inputs.generator,
            inputs.nbytes(),
        )
        started = time.perf_counter()
        outputs = run_reference(definition, inputs.values)
        _synchronize(target)
        run.reference_seconds = time.perf_counter() - started
        run.problems = output_problems(definition, workload, outputs, target)
        run.outputs = [
            {"name": name, "shape": list(value.shape), "dtype": dtype_name(value.dtype)}
            for name, value in zip(definition.outputs, outputs, strict=False)
            if isinstance(value, torch.Tensor)
        ]
        run.status = "failed" if run.problems else "passed"
        if keep is not None and not run.problems:
            started = time.perf_counter()
            keep(outputs)
            run.keep_seconds = time.perf_counter() - started
        if tolerance is not None and not run.problems:
            ambiguous = ambiguous_rows(definition, tolerance, inputs.values, outputs)
            _compare_with_engine(
                run, definition, workload, outputs, capture, data_root, tolerance, ambiguous
            )
    except DatasetError as error:
        run.status, run.problems = "input_error", [str(error)]
    except Exception as error:  # a reference that raises is a failed case, not a crash
        run.status, run.problems = "reference_error", [f"{type(error).__name__}: {error}"]
    finally:
        inputs = outputs = made = None
        if run.status in ("input_error", "reference_error"):
            # a traceback's frames may hold the inputs in a cycle; otherwise counting
            # references frees them, and a full collection per workload cost 50-100 ms
            gc.collect()
    if target.type == "cuda":
        run.peak_memory_bytes = torch.cuda.max_memory_allocated(target)
        run.peak_memory_scope = "this case, CUDA allocator"
    else:
        run.peak_memory_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        run.peak_memory_scope = "process high-water RSS so far"
    return run


def _compare_with_engine(
    run: ReferenceRun,
    definition: Definition,
    workload: Workload,
    outputs: list,
    capture: CaptureRecord | None,
    data_root: Path,
    tolerance: Tolerance,
    ambiguous: torch.Tensor | None,
) -> None:
    descriptors = engine_outputs(definition, capture)
    if descriptors is None:
        run.engine_output = "none kept: checked for finite outputs of the declared shapes"
        return
    if run.inputs != "captured":
        run.engine_output = f"not compared: {run.inputs} inputs"
        return
    for entry, name, value in zip(run.outputs, definition.outputs, outputs, strict=True):
        engine = load_engine_output(definition, workload, name, descriptors[name], data_root)
        named = tolerance.ambiguity.outputs if tolerance.ambiguity else []
        rows = ambiguous if name in named else None
        verdict = compare(engine.to(value.device), value, tolerance, rows)
        entry.update({k: v for k, v in verdict.to_dict().items() if k != "status"})
        entry["status"] = verdict.status
        if not verdict.passed:
            run.status = verdict.status
            run.problems.append(f"{name}: engine output vs reference: {verdict.message}")
    run.engine_output = "compared"
