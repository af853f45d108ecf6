"""Deterministic random streams and number formats shared by the stand-in generators.

Every input of every workload has its own stream, seeded by sha256 of the workload
uuid and the input name, so a tensor does not change when another input's generator
changes. A model parameter (``Streams.model``: the grouped GEMM's expert weights) has one
stream per definition instead: every workload of the definition gets the same weights, as
every call of one model layer does, and a process generates them once
(``StandinContext.parameter``). Values are drawn on the CPU with numpy's PCG64 and only
then moved, so a stand-in is byte-identical on every device.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property

import numpy as np
import torch

STANDIN_VERSION = "2"  # bump when any generator's output changes
CHUNK = 1 << 22  # elements per independently seeded chunk of a large tensor
# Threads that draw a large tensor's chunks (the values do not depend on it); a helper that
# draws beside timed work takes fewer (judge/prefetch.py).
_THREADS = int(os.environ.get("INFERENCE_KERNELS_STANDIN_THREADS") or min(16, os.cpu_count() or 1))


class Stream:
    """The random stream of one input. Large tensors are drawn in chunks, each seeded by
    (stream, chunk index), on several threads: the values do not depend on the thread
    count. ``generator`` serves the small, sequential draws (choices, permutations)."""

    def __init__(self, key: bytes):
        self.seed = int.from_bytes(key, "little")

    @cached_property
    def generator(self) -> np.random.Generator:
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(self.seed)))

    def _fill(self, count: int, draw) -> None:
        def work(chunk: int) -> None:
            seed = np.random.SeedSequence([self.seed, chunk])
            start = chunk * CHUNK
            draw(np.random.Generator(np.random.PCG64(seed)), start, min(count, start + CHUNK))

        chunks = range(-(-count // CHUNK))
        if len(chunks) <= 1:
            for chunk in chunks:
                work(chunk)
            return
        with ThreadPoolExecutor(_THREADS) as pool:
            list(pool.map(work, chunks))

    def normal(self, shape, dtype: torch.dtype, std: float = 1.0) -> torch.Tensor:
        shape = tuple(shape)
        out = torch.empty(shape, dtype=dtype).reshape(-1)

        def draw(g: np.random.Generator, start: int, stop: int) -> None:
            values = g.standard_normal(size=stop - start, dtype=np.float32)
            if std != 1.0:
                values *= np.float32(std)
            out[start:stop] = torch.from_numpy(values)

        self._fill(out.numel(), draw)
        return out.reshape(shape)

    def bytes(self, shape) -> torch.Tensor:
        """Uniform bytes (uint8)."""
        shape = tuple(shape)
        out = np.empty(int(np.prod(shape, dtype=np.int64)), dtype=np.uint8)
        top = np.iinfo(np.uint64).max

        def draw(g: np.random.Generator, start: int, stop: int) -> None:
            words = g.integers(0, top, size=-(-(stop - start) // 8), dtype=np.uint64, endpoint=True)
            out[start:stop] = words.view(np.uint8)[: stop - start]

        self._fill(out.size, draw)
        return torch.from_numpy(out).reshape(shape)

    def integers(self, low: int, high: int, shape) -> torch.Tensor:
        """Uniform integers in [low, high) as uint8 (scale bytes), drawn in chunks."""
        shape = tuple(shape)
        out = np.empty(int(np.prod(shape, dtype=np.int64)), dtype=np.uint8)

        def draw(g: np.random.Generator, start: int, stop: int) -> None:
            out[start:stop] = g.integers(low, high, size=stop - start, dtype=np.uint8)

        self._fill(out.size, draw)
        return torch.from_numpy(out).reshape(shape)

    def unit_vectors(self, shape, dtype: torch.dtype) -> torch.Tensor:
        """Vectors of L2 norm 1 along the last dimension (post-L2-normalization Q/K)."""
        values = self.normal(shape, torch.float32)
        return (values / values.norm(dim=-1, keepdim=True)).to(dtype)


class Streams:
    """``streams("Q")`` is the stream of input Q of this workload; ``streams.model("W")``
    that of a model parameter, one for every workload of the definition (``owner``), as a
    model's weights are the same in every call."""

    def __init__(self, uuid: str, owner: str = ""):
        self.uuid = uuid
        self.owner = owner

    def __call__(self, name: str) -> Stream:
        return _stream(f"{self.uuid}/{name}")

    def model(self, name: str) -> Stream:
        return _stream(f"model/{self.owner}/{name}")


def _stream(key: str) -> Stream:
    text = f"inference-kernels/{STANDIN_VERSION}/{key}"
    return Stream(hashlib.sha256(text.encode()).digest()[:16])


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


def composition(g: np.random.Generator, total: int, parts: int, minimum: int = 1) -> list[int]:
    """``parts`` integers >= minimum that sum to ``total`` (a random composition)."""
    spare = total - parts * minimum
    if spare < 0:
        raise ValueError(f"cannot split {total} into {parts} parts of at least {minimum}")
    cuts = np.sort(g.integers(0, spare + 1, size=parts - 1)) if parts > 1 else np.empty(0)
    bounds = np.concatenate(([0], cuts, [spare])).astype(np.int64)
    return [int(size) + minimum for size in np.diff(bounds)]
