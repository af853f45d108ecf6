"""Deterministic random streams and number formats shared by the stand-in generators.

Every input of every workload has its own stream, seeded by sha256 of the workload
uuid and the input name, so a tensor does not change when another input's generator
changes. Values are drawn on the CPU with numpy's PCG64 and only then moved, so a
stand-in is byte-identical on every device.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

STANDIN_VERSION = "1"  # bump when any generator's output changes


class Streams:
    """``streams("Q")`` is the generator for input Q of this workload."""

    def __init__(self, uuid: str):
        self.uuid = uuid

    def __call__(self, name: str) -> np.random.Generator:
        digest = hashlib.sha256(f"inference-kernels/{STANDIN_VERSION}/{self.uuid}/{name}".encode())
        return np.random.Generator(np.random.PCG64(int.from_bytes(digest.digest()[:16], "little")))


def normal(g: np.random.Generator, shape, dtype: torch.dtype, std: float = 1.0) -> torch.Tensor:
    values = g.standard_normal(size=tuple(shape), dtype=np.float32)
    if std != 1.0:
        values *= np.float32(std)
    return torch.from_numpy(values).to(dtype)


def random_bytes(g: np.random.Generator, shape) -> torch.Tensor:
    """Uniform bytes (uint8), drawn 8 at a time: fast enough for multi-GB weights."""
    count = int(np.prod(shape, dtype=np.int64))
    top = np.iinfo(np.uint64).max
    words = g.integers(0, top, size=-(-count // 8), dtype=np.uint64, endpoint=True)
    words = words.view(np.uint8)[:count]
    return torch.from_numpy(words).reshape(tuple(shape))


def unit_vectors(g: np.random.Generator, shape, dtype: torch.dtype) -> torch.Tensor:
    """Vectors of L2 norm 1 along the last dimension (post-L2-normalization Q/K)."""
    values = torch.from_numpy(g.standard_normal(size=tuple(shape), dtype=np.float32))
    return (values / values.norm(dim=-1, keepdim=True)).to(dtype)


# ----------------------------------------------------------------------------- formats

E4M3_MAX = 448.0
E2M1_MAX = 6.0
E2M1_MAGNITUDES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def ue8m0_ceil(values: torch.Tensor) -> torch.Tensor:
    """The UE8M0 byte (as uint8) of the smallest power of two >= values, within [1, 254]."""
    exponent = torch.ceil(torch.log2(values.clamp_min(2.0**-126)))
    return (exponent + 127).clamp(1, 254).to(torch.uint8)


def quantize_e4m3_ue8m0(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 e4m3 values with one UE8M0 scale byte per ``group`` elements of the last dim.

    Scale = 2^ceil(log2(amax / 448)), as the producers round it; returns (fp8, uint8).
    """
    grouped = x.float().reshape(*x.shape[:-1], x.shape[-1] // group, group)
    scale = ue8m0_ceil(grouped.abs().amax(-1) / E4M3_MAX)
    factor = torch.exp2(scale.float() - 127)[..., None]
    quantized = (grouped / factor).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return quantized.reshape(x.shape), scale


def e2m1_codes(x: torch.Tensor) -> torch.Tensor:
    """Round to the nearest FP4 e2m1 value; return 4-bit codes (bit 3 = sign) as uint8."""
    magnitudes = E2M1_MAGNITUDES.to(x.device)
    midpoints = (magnitudes[1:] + magnitudes[:-1]) / 2
    index = torch.bucketize(x.abs().clamp_max(E2M1_MAX), midpoints)
    sign = (x < 0).to(torch.uint8) << 3
    return index.to(torch.uint8) | sign


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """Pairs along the last dim into bytes: element 2i in the low nibble, 2i+1 in the high."""
    pairs = codes.reshape(*codes.shape[:-1], codes.shape[-1] // 2, 2)
    return pairs[..., 0] | (pairs[..., 1] << 4)


def distinct_sorted(g: np.random.Generator, high: int, count: int) -> torch.Tensor:
    """``count`` distinct integers from [0, high), ascending."""
    chosen = g.choice(high, size=count, replace=False) if count else np.empty(0, np.int64)
    return torch.from_numpy(np.sort(chosen).astype(np.int64))


def composition(g: np.random.Generator, total: int, parts: int, minimum: int = 1) -> list[int]:
    """``parts`` integers >= minimum that sum to ``total`` (a random composition)."""
    spare = total - parts * minimum
    if spare < 0:
        raise ValueError(f"cannot split {total} into {parts} parts of at least {minimum}")
    cuts = np.sort(g.integers(0, spare + 1, size=parts - 1)) if parts > 1 else np.empty(0)
    bounds = np.concatenate(([0], cuts, [spare])).astype(np.int64)
    return [int(size) + minimum for size in np.diff(bounds)]
