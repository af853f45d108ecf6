"""The fallback for definitions without a generator of their own (e.g. a peer's dataset).

It knows no invariants: floating inputs are unit normal, integers are drawn from
[0, 8) so that small index tensors stay in range more often than not, bools are fair
coins, and random scalars are 1. Results that use it say so ("generic stand-in").
"""

from __future__ import annotations

import numpy as np
import torch

from ...dtypes import torch_dtype
from .context import StandinContext


def generic(ctx: StandinContext) -> dict[str, object]:
    values: dict[str, object] = {}
    for name, spec in ctx.definition.inputs.items():
        dtype = torch_dtype(spec.dtype)
        stream = ctx.streams(name)
        g = stream.generator
        if spec.shape is None:
            values[name] = True if dtype == torch.bool else (1.0 if dtype.is_floating_point else 1)
        elif dtype.is_floating_point:
            values[name] = stream.normal(ctx.shape(name), torch.float32).to(dtype)
        elif dtype == torch.bool:
            values[name] = torch.from_numpy(g.integers(0, 2, ctx.shape(name)).astype(np.bool_))
        else:
            values[name] = torch.from_numpy(g.integers(0, 8, ctx.shape(name))).to(dtype)
    return values
