"""Shared helpers for the reference tests: load the dataset once, compile references."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from inference_kernels.dataset.layout import Dataset
from inference_kernels.materialize.references import compile_reference, full_fp32


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """These tests run many tiny ops; intra-op threads only add overhead (10x on 2 cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def dataset(bundled: Dataset) -> Dataset:
    assert not bundled.problems, bundled.problems
    return bundled


@pytest.fixture(scope="session")
def reference(dataset: Dataset) -> Callable[[str], Callable[..., Any]]:
    """reference(name) -> the definition's compiled ``run``, executed in full FP32."""
    compiled: dict[str, Callable[..., Any]] = {}

    def get(name: str) -> Callable[..., Any]:
        if name not in compiled:
            function = compile_reference(dataset.definitions[name])

            def run(*args: Any, _function: Callable[..., Any] = function) -> Any:
                with full_fp32():
                    return _function(*args)

            compiled[name] = run
        return compiled[name]

    return get


@pytest.fixture(scope="session")
def const_axes(dataset: Dataset) -> Callable[[str], dict[str, int]]:
    """const_axes(name) -> the definition's constant axes, e.g. {"H": 8, "D": 64}."""
    return lambda name: dataset.definitions[name].const_axes()
