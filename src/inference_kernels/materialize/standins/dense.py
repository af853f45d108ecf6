"""Stand-ins for dense GEMMs and dense/prefix attention (Qwen-Image, LTX).

Activations are unit-variance (post-normalization hidden states, post-RMSNorm/RoPE
Q/K); weights have the 0.02 standard deviation of trained projection layers.
"""

from __future__ import annotations

import torch

from .context import StandinContext


def gemm(ctx: StandinContext) -> dict[str, torch.Tensor]:
    """Unit-normal activations, weights (and a bias, when declared) of std 0.02."""
    tensors = {
        "A": ctx.streams("A").normal(ctx.shape("A"), torch.bfloat16),
        "W": ctx.streams("W").normal(ctx.shape("W"), torch.bfloat16, std=0.02),
    }
    if "bias" in ctx.definition.inputs:
        tensors["bias"] = ctx.streams("bias").normal(ctx.shape("bias"), torch.bfloat16, std=0.02)
    return tensors


def attention(ctx: StandinContext) -> dict[str, torch.Tensor]:
    """Q/K/V-style inputs: every bfloat16 tensor input is unit normal."""
    return {
        name: ctx.streams(name).normal(ctx.shape(name), torch.bfloat16)
        for name, spec in ctx.definition.inputs.items()
        if spec.shape is not None and spec.dtype == "bfloat16"
    }


def prefix0(ctx: StandinContext) -> dict[str, torch.Tensor]:
    """Unit-normal Q/K/V and the image IDs of the engine's prefix segments.

    image_ids follows the capture's ``prefix_segments`` ([start, end, is_image] in
    order; each image segment gets the next ID, text is -1) when the capture record
    has them; otherwise a text / image / text split of the sequence.
    """
    tensors = attention(ctx)
    length = ctx.dims["Nq"]
    segments = ctx.capture_field("prefix_segments")
    if not segments or segments[-1][1] != length:
        third = length // 3
        segments = [
            [0, third, False],
            [third, length - third, True],
            [length - third, length, False],
        ]
    image_ids = torch.full((length,), -1, dtype=torch.int32)
    next_image = 0
    for start, end, is_image in segments:
        if is_image:
            image_ids[start:end] = next_image
            next_image += 1
    tensors["image_ids"] = image_ids
    return tensors


def neighborhood(ctx: StandinContext) -> dict[str, torch.Tensor]:
    """Q carries the model's softmax scale (na3d is called with scale=1): Q ~ N(0, 1/D)."""
    head_dim = ctx.dims["D"]
    return {
        "Q": ctx.streams("Q").normal(ctx.shape("Q"), torch.bfloat16, std=head_dim**-0.5),
        "K": ctx.streams("K").normal(ctx.shape("K"), torch.bfloat16),
        "V": ctx.streams("V").normal(ctx.shape("V"), torch.bfloat16),
    }
