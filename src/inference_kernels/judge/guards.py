"""Defences that run beside the solution: copies, perturbation, aliasing, poisoning.

The functions a solution could patch to fool these checks (``torch.Tensor.equal``,
``fill_``...) are bound here at import, before any solution is imported, and called
through those bindings.
"""

from __future__ import annotations

from typing import Any

import torch

_clone = torch.Tensor.clone
_fill = torch.Tensor.fill_
_untyped_storage = torch.Tensor.untyped_storage
_float = torch.Tensor.float
_copy = torch.Tensor.copy_
_TENSOR = torch.Tensor
_STRIDED = torch.strided

# Mantissa bits per floating dtype: a relative change of 2^-bits moves a value by ~1 ulp.
_MANTISSA = {
    torch.float64: 52,
    torch.float32: 23,
    torch.float16: 10,
    torch.bfloat16: 7,
    torch.float8_e4m3fn: 3,
    torch.float8_e5m2: 2,
}
_CHUNK = 1 << 26  # elements perturbed at a time


def is_plain_tensor(value: Any) -> bool:
    """Exactly a dense torch.Tensor: subclasses (lazy or wrapper tensors) and sparse or
    other non-strided layouts are refused."""
    return type(value) is _TENSOR and value.layout == _STRIDED


def perturb(value: Any, copy_index: int) -> Any:
    """A copy at a new address, each floating element moved up or down by about one ulp.

    The direction is random per element and per copy, so every copy holds different
    values. Index and integer tensors, and scalars, keep their values.
    """
    if not isinstance(value, torch.Tensor):
        return value
    bits = _MANTISSA.get(value.dtype)
    if bits is None or value.numel() == 0:
        return _clone(value)
    generator = torch.Generator(device=value.device).manual_seed(1000 + copy_index)
    copy = _clone(value, memory_format=torch.contiguous_format)
    flat, finfo = copy.view(-1), torch.finfo(value.dtype)
    for start in range(0, flat.numel(), _CHUNK):  # chunks bound the float32 temporaries
        piece = flat[start : start + _CHUNK]
        signs = torch.randint(
            0, 2, piece.shape, generator=generator, device=value.device, dtype=torch.int8
        )
        moved = _float(piece) * (1 + (2 * signs - 1) * 2.0**-bits)
        _copy(piece, moved.clamp(finfo.min, finfo.max))
    return copy


def make_copies(inputs: list[Any], count: int, share_integers: bool = False) -> list[list[Any]]:
    """``count`` input sets at new addresses for timing: set 0 byte-identical to ``inputs``,
    the others perturbed. With ``share_integers`` (too little memory for full copies)
    integer tensors are shared by all sets rather than copied."""
    sets = []
    for index in range(count):
        current = []
        for value in inputs:
            if share_integers and isinstance(value, torch.Tensor) and value.dtype not in _MANTISSA:
                current.append(value)
            else:
                current.append(
                    _clone(value)
                    if index == 0 and isinstance(value, torch.Tensor)
                    else perturb(value, index)
                )
        sets.append(current)
    return sets


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


def poison(outputs: list[Any]) -> None:
    """Fill outputs with NaN (floating) or all-ones bits (integers) before a graph replay."""
    for output in outputs:
        if isinstance(output, torch.Tensor) and output.numel():
            if output.is_floating_point():
                _fill(output, float("nan"))
            elif output.dtype == torch.bool:
                _fill(output, True)
            else:
                _fill(output, -1)


def as_list(result: Any, names: list[str]) -> list[Any] | None:
    """A solution's return value as outputs in ``names`` order, or None if they do not match."""
    if isinstance(result, dict):
        return [result[name] for name in names] if set(result) == set(names) else None
    values = list(result) if isinstance(result, (tuple, list)) else [result]
    return values if len(values) == len(names) else None
