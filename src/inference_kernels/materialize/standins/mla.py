"""Stand-ins for DeepSeek V4.1 sparse MLA prefill and mixed FP8/FP4 MLA decode.

Queries and latent KV rows are unit normal (post-normalization/RoPE); sinks are
unit normal per head. Sparse index rows hold distinct valid positions followed by
-1 padding. Prefill rows are causal: query i of M sees the first
ceil((i+1) * Nkv / M) KV rows and selects min(topk, visible) of them.

Mixed decode caches use the serving fork's page layout: each page holds its P data
rows, then its P scale rows. FP8 rows are 512 e4m3 bytes + 16 UE8M0 bytes (scale
2^ceil(log2(amax/448)) per 32 dims); FP4 rows are 256 bytes of e2m1 pairs (even dim in
the low nibble) + 32 e4m3 scales (amax/6, clamped to [2^-9, 448], per 16 dims).
"""

from __future__ import annotations

import numpy as np
import torch

from .context import StandinContext
from .streams import e2m1_codes, pack_nibbles, quantize_e4m3_ue8m0

FP4_GROUP = 16


def _index_rows(
    g: np.random.Generator, rows: int, width: int, visible: list[int], counts: list[int]
):
    """[rows, width] int32: row r holds counts[r] distinct picks from [0, visible[r]), then -1."""
    out = np.full((rows, width), -1, dtype=np.int32)
    for row in range(rows):
        out[row, : counts[row]] = g.choice(visible[row], size=counts[row], replace=False)
    return torch.from_numpy(out)


def sparse_prefill(ctx: StandinContext) -> dict[str, torch.Tensor]:
    rows, kv_rows, topk = ctx.dims["M"], ctx.dims["Nkv"], ctx.dims["TOPK"]
    visible = [-(-(row + 1) * kv_rows // rows) for row in range(rows)]
    counts = [min(topk, seen) for seen in visible]
    indices = _index_rows(ctx.streams("indices").generator, rows, topk, visible, counts)
    return {
        "Q": ctx.streams("Q").normal(ctx.shape("Q"), torch.bfloat16),
        "KV": ctx.streams("KV").normal(ctx.shape("KV"), torch.bfloat16),
        "indices": indices.reshape(ctx.shape("indices")),
        "topk_length": torch.tensor(counts, dtype=torch.int32),
        "attn_sink": ctx.streams("attn_sink").normal(ctx.shape("attn_sink"), torch.float32),
    }


def fp8_pages(latent: torch.Tensor) -> torch.Tensor:
    """[pages, P, 512] float -> [pages, P, 1, 528] int8 page bytes (data rows, scale rows)."""
    pages, size, dim = latent.shape
    values, scales = quantize_e4m3_ue8m0(latent, 32)
    data = values.view(torch.uint8).reshape(pages, size * dim)
    page = torch.cat((data, scales.reshape(pages, size * dim // 32)), dim=1)
    return page.view(torch.int8).reshape(pages, size, 1, dim + dim // 32)


def fp4_pages(latent: torch.Tensor) -> torch.Tensor:
    """[pages, P, 512] float -> [pages, P, 1, 288] int8 page bytes (data rows, scale rows)."""
    pages, size, dim = latent.shape
    grouped = latent.float().reshape(pages, size, dim // FP4_GROUP, FP4_GROUP)
    scales = (grouped.abs().amax(-1) / 6.0).clamp(2.0**-9, 448.0).to(torch.float8_e4m3fn)
    codes = e2m1_codes(grouped / scales.float()[..., None]).reshape(pages, size, dim)
    data = pack_nibbles(codes).reshape(pages, size * dim // 2)
    page = torch.cat((data, scales.view(torch.uint8).reshape(pages, size * dim // FP4_GROUP)), 1)
    return page.view(torch.int8).reshape(pages, size, 1, dim // 2 + dim // FP4_GROUP)


def _decode_indices(ctx: StandinContext, name: str, slots: int, topk: int) -> torch.Tensor:
    g = ctx.streams(name).generator
    rows = ctx.dims["B"] * ctx.dims["S"]
    full = min(topk, slots)
    counts = [full] + [int(g.integers(max(1, full // 2), full + 1)) for _ in range(rows - 1)]
    return _index_rows(g, rows, topk, [slots] * rows, counts).reshape(ctx.shape(name))


def mixed_decode(ctx: StandinContext) -> dict[str, torch.Tensor]:
    dims = ctx.dims
    latent8 = ctx.streams("KV8").normal((dims["N8"], dims["P8"], dims["D"]), torch.float32)
    latent4 = ctx.streams("KV4").normal((dims["N4"], dims["P4"], dims["D"]), torch.float32)
    return {
        "Q": ctx.streams("Q").normal(ctx.shape("Q"), torch.bfloat16),
        "KV8": fp8_pages(latent8),
        "KV4": fp4_pages(latent4),
        "indices8": _decode_indices(ctx, "indices8", dims["N8"] * dims["P8"], dims["TOPK8"]),
        "indices4": _decode_indices(ctx, "indices4", dims["N4"] * dims["P4"], dims["TOPK4"]),
        "attn_sink": ctx.streams("attn_sink").normal(ctx.shape("attn_sink"), torch.float32),
    }
