"""One pass over the first suite, shared by the tests that read it.

The smallest workload of every definition is run end to end (``run_case``: materialized,
its reference run on the CPU) and then materialized twice more, one right after the other:
the first of these gives the values the definition's constraints are evaluated on, the
second the bytes the first's must equal. The tests assert on what the pass kept (small
records, never tensors). Each workload is materialized three times here, not four times
across three tests, and the grouped GEMMs' experts (2.3-4.8 GB, kept for one definition at
a time) are made once per definition, not once per test: about 20 s less on two cores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch
from materialized_inputs import made

from inference_kernels.dataset import constraints
from inference_kernels.dataset.blobs import content_hash
from inference_kernels.dataset.selection import select
from inference_kernels.materialize.reference_runs import ReferenceRun, run_case
from inference_kernels.schema import Definition, Workload


def hashes(inputs) -> list:
    return [content_hash(v) if isinstance(v, torch.Tensor) else v for v in inputs.values]


@dataclass
class FirstCase:
    definition: Definition
    workload: Workload
    reference: ReferenceRun  # run_case on the CPU
    hashes: list  # of the inputs materialized after it
    constraints: list[tuple[str, Any]]  # each constraint, what it gave on those inputs
    again: list  # the hashes of the inputs materialized right after those
    origin: str  # of that second materialization
    generator: str | None


def _evaluate(expression: str, values: dict) -> Any:
    try:
        return constraints.evaluate(expression, values)
    except Exception as error:  # kept for the constraint test to show, not raised here
        return error


@pytest.fixture(scope="session")
def first_suite(bundled) -> list[FirstCase]:
    cases = []
    for definition, workload in select(bundled, suite="first"):
        run = run_case(
            definition,
            workload,
            data_root=bundled.root,
            device="cpu",
            capture=bundled.captures.get(workload.uuid),
        )
        first = made(bundled, definition, workload)
        values = {**definition.const_axes(), **workload.axes}
        values.update(zip(first.names, first.values, strict=True))
        evaluated = [(e, _evaluate(e, values)) for e in definition.constraints]
        digests = hashes(first)
        del first, values
        second = made(bundled, definition, workload)
        again = hashes(second)
        origin, generator = second.origin, second.generator
        del second
        cases.append(
            FirstCase(definition, workload, run, digests, evaluated, again, origin, generator)
        )
    return cases
