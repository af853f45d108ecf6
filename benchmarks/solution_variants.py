"""Tuning constants of one of our kernels, swept: every combination of the module constants
given (``--set NAME=V1,V2``), each checked against the reference under the task's tolerance
(the referee's acceptance, ambiguity included) and timed in a CUDA graph (Triton's
``do_bench_cudagraph``, median) on each dev workload of its definition, beside the solution
as it is. Prints one JSON document: per workload, the variants fastest first.

    PYTHONPATH=src python3 benchmarks/solution_variants.py \\
        triton_qsa_index_topk_decode_qwen38_h4_d128_topk512_c4 \\
        --set BITS=4,8 --set SEGMENT=2048,4096 > qsa-variants.json

A tuning aid, not a judged time: one process, no sandbox, no regime, the bundled dataset's
inputs (stand-ins where it has no tensors). With ``--device cpu`` (and TRITON_INTERPRET=1
for Triton kernels) it checks each variant's correctness in the interpreter and reports no
time. A constant that a kernel reads itself (not ``run``) cannot change once compiled:
that variant is reported as failed, with Triton's message.
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import json
import sys
import tempfile
from pathlib import Path

import torch

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.dataset.selection import select
from inference_kernels.judge.loader import load_package, write_package
from inference_kernels.materialize.inputs import materialize
from inference_kernels.materialize.references import accepted, run_reference

ROOT = Path(__file__).resolve().parents[1]


def _value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def settings(pairs: list[str]) -> dict[str, list]:
    """``["BITS=4,8", "SEGMENT=2048"]`` -> {"BITS": [4, 8], "SEGMENT": [2048]}."""
    found = {}
    for pair in pairs:
        name, sep, values = pair.partition("=")
        if not sep or not name or not values:
            raise SystemExit(f"--set {pair!r}: expected NAME=V1,V2,...")
        found[name] = [_value(v) for v in values.split(",")]
    return found


def variants(grid: dict[str, list]) -> list[dict]:
    """The solution as it is ({}), then every combination of the grid's values."""
    names = list(grid)
    return [{}] + [
        dict(zip(names, combo, strict=True)) for combo in itertools.product(*grid.values())
    ]


def _poison(outputs: list[torch.Tensor]) -> None:
    """Fill the destination buffers with what no reference gives (NaN, the lowest integer),
    so that a variant cannot pass on what the one before it wrote."""
    for output in outputs:
        if output.dtype.is_floating_point:
            output.fill_(float("nan"))
        elif output.dtype == torch.bool:
            output.fill_(True)
        else:
            output.fill_(torch.iinfo(output.dtype).min)


def _time_us(call, device: str, rep_ms: int) -> float | None:
    if device == "cpu":
        return None
    from triton.testing import do_bench_cudagraph

    return 1000.0 * do_bench_cudagraph(call, rep=rep_ms, return_mode="median")


def sweep(
    dataset,
    solution_name: str,
    grid: dict[str, list],
    *,
    suite: str,
    device: str,
    limit: int | None,
    rep_ms: int,
    log=sys.stderr,
) -> dict:
    solution = dataset.solutions[solution_name]
    definition = dataset.definitions[solution.definition]
    tolerance = dataset.tasks[solution.definition].tolerance
    run = load_package(
        solution, definition, write_package(solution, Path(tempfile.mkdtemp()) / "s")
    ).run
    constants = inspect.unwrap(run).__globals__  # the module's, under any decorator
    unknown = [name for name in grid if name not in constants]
    if unknown:
        raise SystemExit(f"{solution_name} has no module constant {', '.join(unknown)}")
    original = {name: constants[name] for name in grid}
    workloads = [w for _, w in select(dataset, [solution.definition], suite)][:limit]
    report = {"solution": solution_name, "device": device, "suite": suite, "workloads": []}
    if device != "cpu":
        report["gpu"] = torch.cuda.get_device_name(device)
    for index, workload in enumerate(workloads):
        capture = dataset.captures.get(workload.uuid)
        made = materialize(
            definition, workload, data_root=dataset.root, device=device, capture=capture
        )
        inputs = made.values
        expected = run_reference(definition, inputs)
        outputs = [torch.empty_like(e) for e in expected]
        rows = []
        for variant in variants(grid):
            constants.update(original)
            constants.update(variant)
            entry = {"set": variant}
            try:
                _poison(outputs)
                with torch.no_grad():
                    run(*inputs, *outputs)
                entry["passed"] = all(accepted(definition, tolerance, inputs, outputs, expected))
                if entry["passed"]:
                    entry["us"] = _time_us(lambda i=inputs, o=outputs: run(*i, *o), device, rep_ms)
            except Exception as error:  # noqa: BLE001 - a variant that does not run is reported
                entry.update(passed=False, error=f"{type(error).__name__}: {str(error)[:300]}")
            rows.append(entry)
        constants.update(original)
        rows.sort(key=lambda r: (not r["passed"], r.get("us") or 0.0))
        report["workloads"].append(
            {"uuid": workload.uuid, "axes": workload.axes, "inputs": made.origin, "variants": rows}
        )
        print(f"{index + 1}/{len(workloads)} {workload.axes}: {rows[0]}", file=log, flush=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("solution")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="a module constant of the solution and the values to try",
    )
    parser.add_argument("--suite", default="dev", help="workload suite (dev, first, all)")
    parser.add_argument("--limit", type=int, help="the first N workloads of the suite")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rep-ms", type=int, default=100, help="timing per variant and workload")
    parser.add_argument("--dataset", type=Path, default=ROOT / "dataset")
    given = parser.parse_args()
    dataset = load_dataset(given.dataset)
    if given.solution not in dataset.solutions:
        raise SystemExit(f"no solution {given.solution!r} in {given.dataset}")
    report = sweep(
        dataset,
        given.solution,
        settings(given.set),
        suite=given.suite,
        device=given.device,
        limit=given.limit,
        rep_ms=given.rep_ms,
    )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
