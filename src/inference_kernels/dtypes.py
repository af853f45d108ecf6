"""The dtype names a definition may use, and their torch equivalents.

Names follow torch (and the FlashInfer Trace schema): ``bfloat16``, ``float8_e4m3fn``...
"""

from __future__ import annotations

import torch

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
if hasattr(torch, "float4_e2m1fn_x2"):  # flashinfer-bench's packed FP4 dtype, torch >= 2.8
    TORCH_DTYPES["float4_e2m1"] = torch.float4_e2m1fn_x2

DTYPE_NAMES: dict[torch.dtype, str] = {value: key for key, value in TORCH_DTYPES.items()}


def torch_dtype(name: str) -> torch.dtype:
    return TORCH_DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))
