"""Checks a worker makes on its own solution's return values: plain tensors, aliasing.

They run beside the solution, so they decide nothing: a solution that disables them only
stops its worker from reporting its own failure early. The functions they use are bound
at import, before any solution is imported.
"""

from __future__ import annotations

from typing import Any

import torch

_untyped_storage = torch.Tensor.untyped_storage
_TENSOR = torch.Tensor
_STRIDED = torch.strided


def is_plain_tensor(value: Any) -> bool:
    """Exactly a dense torch.Tensor: subclasses (lazy or wrapper tensors) and sparse or
    other non-strided layouts are refused."""
    return type(value) is _TENSOR and value.layout == _STRIDED


def _span(tensor: torch.Tensor) -> tuple[int, int] | None:
    storage = _untyped_storage(tensor)
    if storage.nbytes() == 0:
        return None
    start = storage.data_ptr()
    return start, start + storage.nbytes()


def aliased_inputs(outputs: list[Any], inputs: list[Any], names: list[str]) -> list[str]:
    """Names of inputs whose storage any output shares (an output that is, or views, an input)."""
    spans = [
        (name, _span(v))
        for name, v in zip(names, inputs, strict=True)
        if isinstance(v, torch.Tensor)
    ]
    hits = []
    for output in outputs:
        if not isinstance(output, torch.Tensor) or (out := _span(output)) is None:
            continue
        for name, span in spans:
            if span is not None and out[0] < span[1] and span[0] < out[1] and name not in hits:
                hits.append(name)
    return hits


def as_list(result: Any, names: list[str]) -> list[Any] | None:
    """A solution's return value as outputs in ``names`` order, or None if they do not match."""
    if isinstance(result, dict):
        return [result[name] for name in names] if set(result) == set(names) else None
    values = list(result) if isinstance(result, (tuple, list)) else [result]
    return values if len(values) == len(names) else None
