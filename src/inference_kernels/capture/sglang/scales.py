"""UE8M0 scale serialization: engine scale tensors to the dataset's one byte per 32 elements.

A UE8M0 byte ``b`` means ``2**(b - 127)``; 255 is NaN and never a valid scale. The grouped
GEMM definitions carry one such byte per 32 K elements, as int8. The engine holds scales in
one of three forms: power-of-two floats, raw bytes (uint8 / int8 / float8_e8m0fnu), or int32
words of four bytes (DeepGEMM's packed layout, MN-major in memory). These functions mirror
the seed's ``scales`` helper in ``scripts/capture_llm.py``. Pure tensor code, unit-tested.
"""

from __future__ import annotations

import torch

_BYTE_DTYPES = (torch.uint8, torch.int8) + (
    (torch.float8_e8m0fnu,) if hasattr(torch, "float8_e8m0fnu") else ()
)


def ue8m0_from_float(scales: torch.Tensor) -> torch.Tensor:
    """Power-of-two float scales to UE8M0 bytes ``log2(s) + 127``, returned as int8.

    Exact: the exponent comes from ``frexp``, not a floating ``log2``. A scale that is not a
    positive finite power of two, or whose byte would fall outside 0..254, raises
    ``ValueError``. Mirrors the float branch of the seed's ``scales``.
    """
    values = scales if scales.dtype == torch.float64 else scales.float()
    if not bool(torch.isfinite(values).all()) or bool((values <= 0).any()):
        raise ValueError("UE8M0 scales must be positive and finite")
    mantissa, exponent = torch.frexp(values)
    if bool((mantissa != 0.5).any()):
        raise ValueError("a scale is not an exact power of two")
    biased = exponent.long() - 1 + 127
    if bool(((biased < 0) | (biased > 254)).any()):
        raise ValueError("a scale is outside the UE8M0 range 2^-127 .. 2^127")
    return biased.to(torch.uint8).view(torch.int8)


def ue8m0_from_words(words: torch.Tensor) -> torch.Tensor:
    """Unpack int32 scale words into bytes along the last dim: ``[..., W]`` -> ``[..., 4W]``.

    Byte ``j`` of word ``w`` (``j = 0`` the least significant) becomes position ``4w + j``:
    the order of a little-endian ``view(int8)``, which is what the seed did on the GPU, done
    here with shifts so the result does not depend on the host. Works on the logical
    ``[rows, words]`` view, so an MN-major (column-major) word tensor needs no special care.
    """
    if words.dtype != torch.int32:
        raise TypeError(f"expected int32 words, got {words.dtype}")
    unsigned = words.long() & 0xFFFFFFFF
    shifts = torch.tensor([0, 8, 16, 24], dtype=torch.long, device=words.device)
    parts = (unsigned.unsqueeze(-1) >> shifts) & 0xFF
    return parts.reshape(*words.shape[:-1], 4 * words.shape[-1]).to(torch.uint8).view(torch.int8)


def ue8m0_bytes(scales: torch.Tensor) -> torch.Tensor:
    """Any engine scale form to int8 UE8M0 bytes: int32 words are unpacked, byte dtypes are
    reinterpreted, floating scales are converted with ``ue8m0_from_float``."""
    if scales.dtype == torch.int32:
        return ue8m0_from_words(scales)
    if scales.dtype in _BYTE_DTYPES:
        return scales.view(torch.int8)
    if scales.is_floating_point():
        return ue8m0_from_float(scales)
    raise TypeError(f"no UE8M0 reading of {scales.dtype} scales")


def expand_scale_groups(
    scales: torch.Tensor, k: int, group_size: int, target_group: int = 32
) -> torch.Tensor:
    """Scales of ``group_size``-element K groups to one int8 byte per ``target_group``.

    ``scales`` is ``[..., n]`` with ``n = k / group_size`` (floats or bytes), or int32 words
    ``[..., ceil(n / 4)]`` whose last word may carry padding bytes, which are cut. Each
    scale is then repeated ``group_size / target_group`` times: a group-128 activation scale
    becomes four identical group-32 bytes, as in the seed's ``scales``. A group size that is
    not a multiple of ``target_group``, a ``k`` that is not a multiple of the group size, a
    width that does not match ``n``, or a kept byte of 255 (NaN) raises ``ValueError``.
    """
    if group_size < target_group or group_size % target_group:
        raise ValueError(f"group {group_size} is not a multiple of {target_group}")
    if k % group_size:
        raise ValueError(f"K={k} is not a multiple of the group size {group_size}")
    groups = k // group_size
    packed = scales.dtype == torch.int32
    expected = -(-groups // 4) * 4 if packed else groups
    data = ue8m0_bytes(scales)
    if data.shape[-1] != expected:
        form = "int32-word" if packed else "scale"
        raise ValueError(
            f"{data.shape[-1]} {form} bytes per row; K={k} in groups of {group_size} "
            f"needs {expected}"
        )
    data = data[..., :groups]
    if bool((data.view(torch.uint8) == 255).any()):
        raise ValueError("scale byte 255 (NaN in UE8M0)")
    return data.repeat_interleave(group_size // target_group, dim=-1)
