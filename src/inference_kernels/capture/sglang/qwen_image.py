"""SGLang capture hooks for the diffusion model Qwen-Image 2.1.

SGLang (and its CUDA kernels) cannot run in this environment, so these hooks are not
exercised here. The adapter steps they use (``adapters.py``) are unit-tested in
``tests/capture/test_sglang_adapters.py``. The wrapped functions follow the seed capture
(``scripts/capture_inputs.py`` / ``scripts/capture_ltx.py``, SGLang commit 684fea8a) and its
receipts; SGLang is imported only inside ``install_qwen_image``.

Qwen-Image (``install_qwen_image``):
- ``torch.nn.functional.linear`` and ``torch.mm`` inside the transformer's forward, leading
  dimensions flattened into M: ``dense_gemm_bf16_nt_n{N}_k{K}``, bias-free BF16, M >= 4096;
- ``QwenImage21Attention.attend_sample``: its ``local_attn`` calls (one per prefix segment)
  compose ``prefix_cached_block_causal_h32_d128_prefix0`` (``image_ids`` from the segment
  list); its ``target_attn`` call gives ``prefix_cached_block_causal_h32_d128``.

Hooks call the engine first and return exactly its result; only when ``writer.wants`` agrees
do they map the call and ``writer.write`` it. A call that does not fit raises ``ValueError``.
"""

from __future__ import annotations

from typing import Any

import torch

from ._runtime import Patches, bind, new_context, provenance, require_sglang
from .adapters import image_ids_from_segments
from .diffusion_common import (
    ModulePaths,
    all_visible,
    report_attention,
    track_steps,
    waiting_for_attention,
)

MIN_GEMM_ROWS = 4096  # the dense GEMM definitions keep only calls with M >= 4096
PREFIX = "prefix_cached_block_causal_h32_d128"
PREFIX0 = "prefix_cached_block_causal_h32_d128_prefix0"


# --- Qwen-Image -----------------------------------------------------------------------------


def install_qwen_image(writer: Any) -> Patches:
    """Dense GEMMs and prefix-cached block-causal attention of Qwen-Image 2.1."""
    require_sglang("qwen-image")
    from sglang.multimodal_gen.runtime.layers.attention import LocalAttention, USPAttention
    from sglang.multimodal_gen.runtime.models.dits import qwen_image21

    patches, context = Patches("qwen-image"), new_context()
    paths = ModulePaths(patches, context)
    track_steps(patches, context, paths, qwen_image21.QwenImage21Transformer2DModel)

    def gemm(operation, a, weight, output):
        state = context.get()
        if state is None or a.dtype != torch.bfloat16 or weight.dtype != torch.bfloat16:
            return
        n, k = weight.shape
        rows = a.numel() // k
        if rows < MIN_GEMM_ROWS or output.numel() != rows * n:
            return
        name = f"dense_gemm_bf16_nt_n{n}_k{k}"
        record = provenance(
            operation, state, ["flatten_rows"], module_path=paths.current(), variant=f"rows_{rows}"
        )
        if writer.wants(name, record):
            inputs = {"A": a.reshape(rows, k), "W": weight}
            writer.write(name, inputs, {"C": output.reshape(rows, n)}, record)

    def make_linear(original):
        def linear(input, weight, bias=None):
            result = original(input, weight, bias)
            if bias is None and weight.dim() == 2:
                gemm("torch.nn.functional.linear", input, weight, result)
            return result

        return linear

    def make_mm(original):
        def mm(input, mat2, *args, **kwargs):
            result = original(input, mat2, *args, **kwargs)
            if input.dim() == 2 and mat2.dim() == 2:
                gemm("torch.mm", input, mat2.t(), result)
            return result

        return mm

    class Attention:
        @staticmethod
        def on_call(frame, module, method, args, kwargs, result):
            owner = frame["owner"]
            if module is owner.local_attn:
                frame["calls"].append((args, kwargs, result))
            elif module is owner.target_attn:
                target(frame, method, args, kwargs, result)

        @staticmethod
        def on_return(frame, original):
            if frame["calls"]:
                prefix(frame, original)

    def segments_of(frame, original) -> list:
        args, kwargs = frame["values"]
        return [list(s) for s in bind(original, (frame["owner"], *args), kwargs)["segments"]]

    def record_for(frame, operation, adapters, segments=None) -> dict:
        base = paths.get(frame["owner"])
        return provenance(
            operation, context.get(), adapters, module_path=base, prefix_segments=segments
        )

    def target(frame, method, args, kwargs, result):
        if method == "forward_with_replicated_kv_prefix":
            q, k_prefix, v_prefix, k, v = args[:5]
        else:
            q, k_all, v_all = args[:3]
            if not all_visible(kwargs.get("attn_mask")):
                raise ValueError("target-image attention must see every prefix and image key")
            split = k_all.shape[1] - q.shape[1]
            k_prefix, k, v_prefix, v = (
                k_all[:, :split],
                k_all[:, split:],
                v_all[:, :split],
                v_all[:, split:],
            )
        if q.shape[-1] != 128:
            raise ValueError("the image attention definitions fix the head dimension to 128")
        name = PREFIX if k_prefix.shape[1] else PREFIX0
        record = record_for(frame, "QwenImage21Attention.target_attn", ["split_prefix"])
        record["adapter"] = (
            "Preserve post-normalization/RoPE tensors; the target image is one fully visible block."
        )
        if not writer.wants(name, record):
            return
        inputs = {"Q": q, "K_current": k, "V_current": v}
        if k_prefix.shape[1]:
            inputs.update(K_prefix=k_prefix, V_prefix=v_prefix)
        else:
            inputs["image_ids"] = torch.zeros(q.shape[1], dtype=torch.int32)
        writer.write(name, inputs, {"output": result.reshape(q.shape)}, record)

    def prefix(frame, original):
        segments = segments_of(frame, original)
        adapters = ["concat_segment_calls", "image_ids_from_segments"]
        record = record_for(
            frame, "QwenImage21Attention.local_attn (all prefix segments)", adapters, segments
        )
        record["adapter"] = (
            "Preserve post-normalization/RoPE tensors; encode the engine's segment "
            "visibility as image_ids."
        )
        if not writer.wants(PREFIX0, record):
            return
        calls = frame["calls"]
        if len(calls) != len(segments):
            raise ValueError(f"{len(calls)} local attention calls for {len(segments)} segments")
        q = torch.cat([args[0] for args, _, _ in calls], dim=1)
        k, v = calls[-1][0][1], calls[-1][0][2]
        if q.shape[1] != k.shape[1]:
            raise ValueError("segment queries do not cover the prefix keys")
        output = torch.cat([result for _, _, result in calls], dim=1).reshape(q.shape)
        inputs = {
            "Q": q,
            "K_current": k,
            "V_current": v,
            "image_ids": image_ids_from_segments(segments, q.shape[1]),
        }
        writer.write(PREFIX0, inputs, {"output": output}, record)

    patches.wrap(torch.nn.functional, "linear", make_linear)
    patches.wrap(torch, "mm", make_mm)
    for attention_class in (LocalAttention, USPAttention):
        report_attention(patches, attention_class, "forward")
        report_attention(patches, attention_class, "forward_with_replicated_kv_prefix")
    patches.wrap(
        qwen_image21.QwenImage21Attention, "attend_sample", waiting_for_attention(Attention)
    )
    return patches
