"""Stand-ins for the DeepSeek V4.1 MoE: the FP8 x FP4 grouped GEMMs and the router.

Grouped GEMM: activations are unit normal, quantized to e4m3 with one UE8M0 scale
per 32 K elements (2^ceil(log2(amax/448)), as the producers round it). Expert
weights are uniformly random e2m1 codes (every code is a valid FP4 value) with
UE8M0 scales near 2^-8, the magnitude of trained weights (amax/6 ~ 0.004); they are
the model's, the same for every workload of a definition (2.3-4.8 GB, made once). Rows are
sorted by expert; expert popularity is skewed, as real routing is.

Router: unit-normal hidden states, 0.02-std bf16 gate weights, small fp32
selection biases, and a contiguous quarter of the tokens marked as image tokens so
that both bias branches are exercised.
"""

from __future__ import annotations

import numpy as np
import torch

from .context import StandinContext
from .streams import quantize_e4m3_ue8m0


def grouped_gemm(ctx: StandinContext) -> dict[str, torch.Tensor]:
    rows, experts = ctx.dims["M"], ctx.dims["E"]
    activations = ctx.streams("Aq").normal(ctx.shape("Aq"), torch.float32)
    quantized, scale_a = quantize_e4m3_ue8m0(activations, 32)
    weight_scales = ctx.parameter(
        "scale_W", lambda: ctx.streams.model("scale_W").integers(119, 123, ctx.shape("scale_W"))
    )
    g = ctx.streams("expert_id").generator
    popularity = np.exp(g.standard_normal(experts))
    chosen = g.choice(experts, size=rows, p=popularity / popularity.sum())
    return {
        "Aq": quantized,
        "Wq_packed": ctx.parameter(
            "Wq_packed", lambda: ctx.streams.model("Wq_packed").bytes(ctx.shape("Wq_packed"))
        ).view(torch.int8),
        "scale_A": scale_a.view(torch.int8),
        "scale_W": weight_scales.view(torch.int8),
        "expert_id": torch.from_numpy(np.sort(chosen).astype(np.int32)),
    }


def router(ctx: StandinContext) -> dict[str, torch.Tensor]:
    rows = ctx.dims["M"]
    image = torch.zeros(rows, dtype=torch.bool)
    image[rows // 4 : rows // 2] = True
    return {
        "X": ctx.streams("X").normal(ctx.shape("X"), torch.bfloat16),
        "W": ctx.streams("W").normal(ctx.shape("W"), torch.bfloat16, std=0.02),
        "bias_text": ctx.streams("bias_text").normal(ctx.shape("bias_text"), torch.float32, 0.1),
        "bias_image": ctx.streams("bias_image").normal(ctx.shape("bias_image"), torch.float32, 0.1),
        "is_image_token": image,
    }
