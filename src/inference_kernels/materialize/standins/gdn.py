"""Stand-ins for the gated delta net (Qwen3-Next linear attention, MLSys 2026 contest).

Q and K are unit vectors per head: the contest operator performs no L2 normalization,
because the engine normalizes before the call. Gates follow the model's
parameterization: A = exp(A_log) in [1, 16], dt = softplus(a + dt_bias) with
dt_bias = softplus^-1 of a step in [1e-3, 1e-1], so g = exp(-A * dt) lies in (0, 1).
The state is small (|S| ~ 0.1): a recurrent state decays toward bounded values.
"""

from __future__ import annotations

import numpy as np
import torch

from .context import StandinContext
from .streams import composition


def _common(ctx: StandinContext) -> dict[str, torch.Tensor]:
    heads = ctx.dims["num_v_heads"]
    a_log = np.log(ctx.streams("A_log").generator.uniform(1.0, 16.0, size=heads)).astype(np.float32)
    step = np.exp(ctx.streams("dt_bias").generator.uniform(np.log(1e-3), np.log(1e-1), size=heads))
    dt_bias = np.log(np.expm1(step)).astype(np.float32)
    return {
        "q": ctx.streams("q").unit_vectors(ctx.shape("q"), torch.bfloat16),
        "k": ctx.streams("k").unit_vectors(ctx.shape("k"), torch.bfloat16),
        "v": ctx.streams("v").normal(ctx.shape("v"), torch.bfloat16),
        "state": ctx.streams("state").normal(ctx.shape("state"), torch.float32, std=0.1),
        "A_log": torch.from_numpy(a_log),
        "a": ctx.streams("a").normal(ctx.shape("a"), torch.bfloat16),
        "dt_bias": torch.from_numpy(dt_bias),
        "b": ctx.streams("b").normal(ctx.shape("b"), torch.bfloat16),
    }


def decode(ctx: StandinContext) -> dict[str, torch.Tensor]:
    return _common(ctx)


def prefill(ctx: StandinContext) -> dict[str, torch.Tensor]:
    """Adds cu_seqlens: num_seqs nonempty sequences that together hold every token."""
    tensors = _common(ctx)
    lengths = composition(
        ctx.streams("cu_seqlens").generator, ctx.dims["total_seq_len"], ctx.dims["num_seqs"]
    )
    tensors["cu_seqlens"] = torch.tensor(
        np.concatenate(([0], np.cumsum(lengths))), dtype=torch.int64
    )
    return tensors
