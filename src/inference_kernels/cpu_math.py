"""The first call of an elementwise function in a process, on the CPU.

With torch 2.13 (CPU build) the first ``torch.sqrt`` of a process over a large tensor,
split across threads while the machine was loaded, came out wrong in 3 of 18 processes:
off by up to about 1e-4 relative (the router's FP32 reference weights 2.7e-4 from a float64
computation, where the other 15 were within 3e-7), and right on every later call. After
any earlier call, even on four elements, 18 of 18 were right. So every process that runs a
reference or a solution on the CPU calls these functions once on a few elements before it
computes anything it compares: the referee and ``reference`` before the first reference,
the worker before the solution is loaded. ``warm`` is cheap (microseconds) and runs once.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

_FUNCTIONS = (
    torch.sqrt,
    torch.rsqrt,
    torch.exp,
    torch.exp2,
    torch.expm1,
    torch.log,
    torch.log1p,
    torch.log2,
    torch.reciprocal,
    torch.sigmoid,
    torch.tanh,
    torch.erf,
    torch.sin,
    torch.cos,
    F.softplus,
    F.silu,
    F.gelu,
)


@functools.cache
def warm() -> None:
    """Call each elementwise function of ``_FUNCTIONS`` once on a few FP32 elements."""
    values = torch.linspace(0.5, 2.0, 8)
    for function in _FUNCTIONS:
        function(values)
