"""Definitions, tasks and baseline solutions for calls the generic PyTorch hooks capture.

Names follow the dataset's convention: ``dense_gemm_bf16_nt_n{N}_k{K}`` (with ``_bias``
before the sizes when the call adds a bias) and ``noncausal_dense_attention_h{H}_d{D}``.
The references are FP32 and written here, independently of the engine.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from ..schema import Definition, Solution, Task
from .writer import write_atomically

BF16_TOLERANCE = {"atol": 0.005, "rtol": 0.016}
# Fused attention kernels round probabilities to BF16 and can miss the every-element
# bound on a handful of elements, as the bundled attention tasks say.
ATTENTION_TOLERANCE = {**BF16_TOLERANCE, "required_matched_ratio": 0.9999}
TIMING = {"warmup": 10, "iters": 20, "trials": 7}

_GEMM_REFERENCE = '''import torch


@torch.no_grad()
def run({arguments}):
    """C = A @ W^T{bias_text}: FP32 products and sums, one rounding to BF16."""
    weight = W.float()
    C = torch.empty((A.shape[0], W.shape[0]), dtype=torch.bfloat16, device=A.device)
    rows = 4096  # bound the FP32 working set
    for start in range(0, A.shape[0], rows):
        product = A[start : start + rows].float() @ weight.T{bias_add}
        C[start : start + rows] = product.to(torch.bfloat16)
    return C
'''

_ATTENTION_REFERENCE = '''import torch


@torch.no_grad()
def run(Q, K, V):
    """Noncausal attention without a mask, scale head_dim**-0.5, FP32 throughout."""
    scores = torch.einsum("bqhd,bkhd->bhqk", Q.float(), K.float()) * ({D} ** -0.5)
    probabilities = torch.softmax(scores, dim=-1)
    return torch.einsum("bhqk,bkhd->bqhd", probabilities, V.float()).to(torch.bfloat16)
'''


def gemm_name(n: int, k: int, bias: bool) -> str:
    return f"dense_gemm_bf16_nt{'_bias' if bias else ''}_n{n}_k{k}"


def attention_name(heads: int, head_dim: int) -> str:
    return f"noncausal_dense_attention_h{heads}_d{head_dim}"


def gemm_definition(n: int, k: int, bias: bool, tags: list[str]) -> Definition:
    inputs = {
        "A": {"shape": ["M", "K"], "dtype": "bfloat16", "description": "Activations, row-major."},
        "W": {
            "shape": ["N", "K"],
            "dtype": "bfloat16",
            "description": "Weight in nn.Linear layout [out, in].",
        },
    }
    if bias:
        inputs["bias"] = {"shape": ["N"], "dtype": "bfloat16", "description": "Bias per column."}
    return Definition.model_validate(
        {
            "name": gemm_name(n, k, bias),
            "op_type": "gemm",
            "description": (
                f"C = A @ W^T{' + bias' if bias else ''} (torch.nn.functional.linear): BF16 "
                "operands, FP32 accumulation, BF16 output. The capture flattens the "
                "engine's leading dimensions into M. Created by the generic PyTorch hook set."
            ),
            "tags": tags,
            "axes": {
                "M": {"type": "var", "description": "Rows: flattened leading dimensions."},
                "N": {"type": "const", "value": n},
                "K": {"type": "const", "value": k},
            },
            "inputs": inputs,
            "outputs": {"C": {"shape": ["M", "N"], "dtype": "bfloat16"}},
            "constraints": ["M >= 1"],
            "reference": _GEMM_REFERENCE.format(
                arguments="A, W, bias" if bias else "A, W",
                bias_text=" + bias" if bias else "",
                bias_add=" + bias.float()" if bias else "",
            ),
        }
    )


def attention_definition(heads: int, head_dim: int, tags: list[str]) -> Definition:
    layout = {"dtype": "bfloat16"}
    return Definition.model_validate(
        {
            "name": attention_name(heads, head_dim),
            "op_type": "dense_attention",
            "description": (
                "Noncausal attention, FP32 accumulation, BF16 output, no dropout. No mask: "
                "the hook set captures only calls whose mask is absent or all visible. "
                "Scale head_dim**-0.5, the only scale captured. Q/K/V are stored as "
                "[B, N, H, D] (the engine's [B, H, N, D] transposed). Created by the "
                "generic PyTorch hook set."
            ),
            "tags": tags,
            "axes": {
                "B": {"type": "var", "description": "Batch size."},
                "Nq": {"type": "var", "description": "Query length."},
                "Nk": {"type": "var", "description": "Key/value length."},
                "H": {"type": "const", "value": heads},
                "D": {"type": "const", "value": head_dim},
            },
            "inputs": {
                "Q": {"shape": ["B", "Nq", "H", "D"], **layout},
                "K": {"shape": ["B", "Nk", "H", "D"], **layout},
                "V": {"shape": ["B", "Nk", "H", "D"], **layout},
            },
            "outputs": {"output": {"shape": ["B", "Nq", "H", "D"], **layout}},
            "constraints": ["B >= 1", "Nq >= 1", "Nk >= 1"],
            "reference": _ATTENTION_REFERENCE.format(D=head_dim),
        }
    )


_GEMM_BASELINE = '''"""C = A @ W^T{bias_text} with F.linear on the BF16 tensors."""

import torch
import torch.nn.functional as F


@torch.no_grad()
def run({arguments}):
    return F.linear({arguments})
'''

_ATTENTION_BASELINE = '''"""Noncausal attention: SDPA on [B, H, N, D] views, default scale."""

import torch
import torch.nn.functional as F


@torch.no_grad()
def run(Q, K, V):
    q, k, v = (x.transpose(1, 2) for x in (Q, K, V))
    return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).contiguous()
'''


def baseline(definition: Definition) -> Solution:
    """The plain-PyTorch baseline solution for a generic definition."""
    if definition.op_type == "gemm":
        bias = "bias" in definition.inputs
        arguments = "A, W, bias" if bias else "A, W"
        source = _GEMM_BASELINE.format(arguments=arguments, bias_text=" + bias" if bias else "")
        text = "F.linear on BF16 tensors (cuBLAS on CUDA, oneDNN on the CPU)."
    else:
        source, text = _ATTENTION_BASELINE, "F.scaled_dot_product_attention, default scale."
    return Solution.model_validate(
        {
            "name": f"torch_{definition.name}",
            "definition": definition.name,
            "author": "inference-kernels",
            "description": f"Plain PyTorch baseline: {text}",
            "spec": {
                "language": "python",
                "target_hardware": ["cpu", "cuda"],
                "entry_point": "main.py::run",
                "dependencies": ["torch>=2.4"],
                "destination_passing_style": False,
            },
            "sources": [{"path": "main.py", "content": source}],
        }
    )


def task(definition: Definition, workload_file: str, dev: list[str]) -> Task:
    attention = definition.op_type == "dense_attention"
    return Task.model_validate(
        {
            "definition": definition.name,
            "description": (
                "BF16 tolerance; 99.99% of elements must pass (fused attention rounds "
                "probabilities to BF16)."
                if attention
                else "BF16 tolerance, every element."
            ),
            "workloads": [workload_file],
            "baseline": f"torch_{definition.name}",
            "tolerance": ATTENTION_TOLERANCE if attention else BF16_TOLERANCE,
            "dev": dev[:10],
            "timing": TIMING,
            "sources": [],
        }
    )


def write_tasks_and_baselines(root: Path, definitions: Iterable[Definition]) -> list[str]:
    """Write a task (dev = the first ten workloads) and the baseline of each definition
    that has workloads in ``root``; returns those definitions' names."""
    written = []
    for definition in definitions:
        name = definition.name
        workload_file = f"workloads/{definition.op_type}/{name}.jsonl"
        path = root / workload_file
        if not path.exists():  # defined, but no call of it was recorded (size budget)
            continue
        uuids = [json.loads(line)["workload"]["uuid"] for line in path.read_text().splitlines()]
        made = task(definition, workload_file, uuids)
        write_atomically(root / "tasks" / f"{name}.json", made.model_dump_json(indent=2) + "\n")
        solution = baseline(definition)
        write_atomically(
            root / "solutions" / definition.op_type / f"{solution.name}.json",
            solution.model_dump_json(indent=2, exclude_none=True) + "\n",
        )
        written.append(name)
    return written
