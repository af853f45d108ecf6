"""SGLang capture hooks for DeepSeek V4.1 Flash: grouped FP8 x FP4 expert GEMMs, the router,
mixed MLA decode, sparse MLA prefill.

SGLang (and its CUDA kernels: FlashMLA, DeepGEMM, the QSA index and sparse-attention
kernels) cannot run in this environment, so these hooks are not exercised here. The adapter
steps they use (``adapters.py``, ``scales.py``) are unit-tested in
``tests/capture/test_sglang_adapters.py``. The wrapped functions and their argument names
are the ones the seed capture script (``scripts/capture_llm.py``, SGLang commit 684fea8a)
wraps; SGLang is imported only inside ``install_deepseek``.

Every hook returns exactly what the engine returned. When ``writer.wants`` declines, the
engine is called untouched. When it accepts, inputs that the engine may overwrite (cache
pages, output buffers) are snapshotted before the call, as the seed did; the mapping to the
definition's inputs then goes through the adapters and ``writer.write``. A call that does not
fit its definition raises ``ValueError`` rather than writing a wrong workload.

DeepSeek runs tensor- and expert-parallel: every rank gathers its shard to rank 0, which alone
writes; rank 0's ``wants`` answer is broadcast so all ranks take the same branch.

Not mapped: the seed's ``DeepGemmMoeQuantInfo.scale_recipes`` patch changed the engine's
own behaviour and is left out; the seed's gate-half ``n2304`` split of the fused GEMM has no
definition.
"""

from __future__ import annotations

from typing import Any

import torch

from ._runtime import (
    Patches,
    bind,
    decide,
    gather_shards,
    new_context,
    provenance,
    require_sglang,
    world,
)
from .adapters import (
    compact_token_pages,
    expand_scale_groups,
    merge_expert_shards,
    sort_selected,
    take_rows,
)
from .llm_steps import track_steps

ROUTER = "moe_router_gemm_topk_deepseek41_d5120_e384_topk6"
MIXED_MLA = "mixed_mla_decode_deepseek41_h64_d512_k8128_k4512"
MLA_HEADS = 64


# --- DeepSeek V4.1 Flash --------------------------------------------------------------------


def _selection_step(state: dict) -> int:
    return 0 if state["scheduler_mode"] == "prefill" else state["step"]


def install_deepseek(writer: Any) -> Patches:
    """DeepSeek V4.1 Flash: grouped FP8 x FP4 expert GEMMs, the router, mixed FP8/FP4 MLA
    decode and sparse MLA prefill, each gathered over the tensor/expert-parallel ranks."""
    require_sglang("deepseek")
    from sgl_kernel import flash_mla
    from sglang.srt.layers import deep_gemm_wrapper
    from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend
    from sglang.srt.models import deepseek_v2
    from sglang.srt.models.deepseek_v4 import DeepseekV4ForCausalLM

    patches, context = Patches("deepseek"), new_context()
    track_steps(patches, context, DeepseekV4ForCausalLM)

    def make_gemm(original):
        def grouped_gemm(lhs, rhs, out, m_indices, *args, **kwargs):
            state = context.get()
            if state is None or rhs[0].dtype not in (torch.uint8, torch.int8):
                return original(lhs, rhs, out, m_indices, *args, **kwargs)
            rank, ranks = world()
            local_experts, n, packed_k = rhs[0].shape
            k = lhs[0].shape[-1]
            name = f"grouped_gemm_fp8_fp4_e{local_experts * ranks}_n{n}_k{k}_g32"
            cached = any(state["prefix_lengths"] or [])
            record = provenance(
                "SGLang DeepGEMM grouped GEMM",
                state,
                ["expand_scale_groups", "merge_expert_shards"],
                selection_step=_selection_step(state),
                variant=f"{state['scheduler_mode']}_{state['tokens']}_cached_{cached}",
                adapter="Gather all expert shards; discard rows marked -1 by the engine; sort "
                "rows by expert stably; serialize UE8M0 scales as one byte per 32 K elements.",
            )
            if k != 2 * packed_k or not decide(writer, name, record):
                return original(lhs, rhs, out, m_indices, *args, **kwargs)
            recipe = kwargs.get("recipe_a", args[0] if args else None) or (1, 128)
            record["activation_scale_group"] = int(recipe[1])
            activations = gather_shards(lhs[0])
            scale_a = gather_shards(expand_scale_groups(lhs[1], k, int(recipe[1])))
            ids = gather_shards(m_indices)
            result = original(lhs, rhs, out, m_indices, *args, **kwargs)
            outputs = gather_shards(out)
            weights = gather_shards(rhs[0].view(torch.int8))
            scale_w = gather_shards(expand_scale_groups(rhs[1], k, 32))
            if rank == 0:
                merged = merge_expert_shards(
                    {"Aq": activations, "scale_A": scale_a}, ids, local_experts
                )
                inputs = {
                    "Aq": merged.rows["Aq"],
                    "Wq_packed": torch.cat(weights),
                    "scale_A": merged.rows["scale_A"],
                    "scale_W": torch.cat(scale_w),
                    "expert_id": merged.expert_id,
                }
                writer.write(name, inputs, {"Y": take_rows(outputs, merged.order)}, record)
            return result

        return grouped_gemm

    def make_gate(original):
        def forward(self, hidden_states, *args, **kwargs):
            state = context.get()
            if state is not None and getattr(self, "e_score_correction_bias", None) is not None:
                state["gate_input"] = (self, hidden_states)
            return original(self, hidden_states, *args, **kwargs)

        return forward

    def make_topk(original):
        def vision_topk(moe, logits, input_ids, *args, **kwargs):
            result = original(moe, logits, input_ids, *args, **kwargs)
            state = context.get()
            if state is None or world()[0] != 0:
                return result
            stash = state.pop("gate_input", None)
            record = provenance(
                "MoEGate.forward followed by vision_topk",
                state,
                ["sort_selected"],
                layer_id=moe.layer_id,
                selection_step=_selection_step(state),
                variant=f"{state['scheduler_mode']}_{logits.shape[0]}",
            )
            if stash is None or not writer.wants(ROUTER, record):
                return result
            gate, hidden = stash
            if gate is not moe.gate:
                raise ValueError("router input and output came from different layers")
            if input_ids is None:
                image = torch.zeros(hidden.shape[0], dtype=torch.bool, device=hidden.device)
            else:
                image = input_ids == moe.config.image_token_id
            config = moe.topk.topk_config
            weights = result.topk_weights
            if not config.apply_routed_scaling_factor_on_output:
                weights = weights * config.routed_scaling_factor
                record["output_adapter"] = (
                    "Apply the engine's deferred routing scale to its selected weights."
                )
            record["engine_expert_ids"] = writer.tensor(result.topk_ids.long(), "engine_expert_ids")
            record["engine_expert_weights"] = writer.tensor(
                weights.float(), "engine_expert_weights"
            )
            record["selection_order"] = (
                "Serialize the unchanged selected expert set by increasing expert ID; "
                "permute the actual weights with their IDs."
            )
            ordered = sort_selected(result.topk_ids.long(), weights.float())
            inputs = {
                "X": hidden.clone(),
                "W": gate.weight,
                "bias_text": gate.e_score_correction_bias.float(),
                "bias_image": gate.e_score_correction_bias_vl.float(),
                "is_image_token": image,
                "routed_scale": float(config.routed_scaling_factor),
            }
            outputs = {"expert_ids": ordered.ids, "expert_weights": ordered.companions[0]}
            writer.write(ROUTER, inputs, outputs, record)
            return result

        return vision_topk

    def make_mla(original):
        def flash_mla_with_kvcache(*args, **kwargs):
            state = context.get()
            if state is None or state["scheduler_mode"] != "decode":
                return original(*args, **kwargs)
            values = bind(original, args, kwargs)
            extra = values.get("extra_k_cache")
            if extra is None or extra.shape[-1] != 288:
                return original(*args, **kwargs)
            record = provenance(
                "flash_mla_with_kvcache mixed FP8/FP4",
                state,
                ["tp_head_gather", "compact_token_pages"],
                adapter="Gather real query heads from all tensor-parallel ranks; preserve all "
                "referenced physical pages and remap indices in first-use order.",
            )
            if not decide(writer, MIXED_MLA, record):
                return original(*args, **kwargs)
            rank, ranks = world()
            heads = MLA_HEADS // ranks
            queries = gather_shards(values["q"][..., :heads, :], dim=2)
            sinks = gather_shards(values["attn_sink"][:heads])
            inputs: dict[str, Any] = {}
            if rank == 0:
                scale = values.get("softmax_scale")
                inputs.update(
                    Q=torch.cat(queries, dim=2),
                    attn_sink=torch.cat(sinks).float(),
                    sm_scale=float(scale) if scale is not None else 512**-0.5,
                )
                caches = (
                    ("8", values["k_cache"], values["indices"], values["topk_length"]),
                    ("4", extra, values["extra_indices_in_kvcache"], values["extra_topk_length"]),
                )
                for suffix, cache, indices, lengths in caches:
                    compact = compact_token_pages(cache, indices, lengths)
                    inputs["KV" + suffix] = compact.pages.view(torch.int8).cpu()
                    inputs["indices" + suffix] = compact.table
                    record["physical_pages_" + suffix] = writer.tensor(
                        compact.physical, "physical_pages_" + suffix
                    )
                    record["allocated_cache_" + suffix] = list(cache.shape)
            result = original(*args, **kwargs)
            outputs = gather_shards(result[0][..., :heads, :], dim=2)
            if rank == 0:
                writer.write(MIXED_MLA, inputs, {"output": torch.cat(outputs, dim=2)}, record)
            return result

        return flash_mla_with_kvcache

    def make_prefill_context(original):
        def forward_prefill_sparse(self, *args, **kwargs):
            state = context.get()
            if state is None:
                return original(self, *args, **kwargs)
            ratio = bind(original, (self, *args), kwargs).get("compress_ratio")
            previous = state.get("mla_compress_ratio")
            state["mla_compress_ratio"] = ratio
            try:
                return original(self, *args, **kwargs)
            finally:
                state["mla_compress_ratio"] = previous

        return forward_prefill_sparse

    def make_sparse(original):
        def flash_mla_sparse_fwd(*args, **kwargs):
            state = context.get()
            if state is None or state["scheduler_mode"] != "prefill":
                return original(*args, **kwargs)
            values = bind(original, args, kwargs)
            q, kv, indices = values["q"], values["kv"], values["indices"]
            name = f"sparse_mla_prefill_h64_d512_k{indices.shape[-1]}"
            ratio = state.get("mla_compress_ratio")
            cached = any(state["prefix_lengths"] or [])
            record = provenance(
                "sgl_kernel.flash_mla.flash_mla_sparse_fwd",
                state,
                ["tp_head_gather"],
                selection_step=0,
                compression_ratio=ratio,
                variant=f"rows_{q.shape[0]}_compression_{ratio}_cached_{cached}",
                adapter="Gather all logical query heads and outputs from tensor-parallel ranks; "
                "retain the complete BF16 workspace and original sparse indices.",
            )
            if not decide(writer, name, record):
                return original(*args, **kwargs)
            rank, ranks = world()
            heads = MLA_HEADS // ranks
            if q.shape[1] < heads or values["d_v"] != 512:
                raise ValueError("unexpected DeepSeek sparse prefill dimensions")
            queries = gather_shards(q[:, :heads], dim=1)
            sinks = gather_shards(values["attn_sink"][:heads])
            inputs: dict[str, Any] = {}
            if rank == 0:
                lengths = values["topk_length"]
                if lengths is None:
                    lengths = torch.full((q.shape[0],), indices.shape[-1], dtype=torch.int32)
                inputs.update(
                    Q=torch.cat(queries, dim=1),
                    KV=kv.clone(),
                    indices=indices.to(torch.int32).clone(),
                    topk_length=lengths.to(torch.int32).clone(),
                    attn_sink=torch.cat(sinks).float(),
                    sm_scale=float(values["sm_scale"]),
                )
            result = original(*args, **kwargs)
            outputs = gather_shards(result[0][:, :heads], dim=1)
            if rank == 0:
                writer.write(name, inputs, {"output": torch.cat(outputs, dim=1)}, record)
            return result

        return flash_mla_sparse_fwd

    patches.wrap(deep_gemm_wrapper, "grouped_gemm_nt_f8f8bf16_contig", make_gemm)
    patches.wrap(deepseek_v2.MoEGate, "forward", make_gate)
    patches.wrap(deepseek_v2, "vision_topk", make_topk)
    patches.wrap(flash_mla, "flash_mla_with_kvcache", make_mla)
    patches.wrap(DeepseekV4AttnBackend, "_forward_prefill_sparse", make_prefill_context)
    patches.wrap(flash_mla, "flash_mla_sparse_fwd", make_sparse)
    return patches
