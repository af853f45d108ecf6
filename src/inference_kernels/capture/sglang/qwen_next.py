"""SGLang capture hooks for Qwen3.8 Flash-Next: the QSA index top-k and sparse GQA decode.

SGLang (and its CUDA kernels: FlashMLA, DeepGEMM, the QSA index and sparse-attention
kernels) cannot run in this environment, so these hooks are not exercised here. The adapter
steps they use (``adapters.py``, ``scales.py``) are unit-tested in
``tests/capture/test_sglang_adapters.py``. The wrapped functions and their argument names
are the ones the seed capture script (``scripts/capture_llm.py``, SGLang commit 684fea8a)
wraps; SGLang is imported only inside ``install_qwen_next``.

Every hook returns exactly what the engine returned. When ``writer.wants`` declines, the
engine is called untouched. When it accepts, inputs that the engine may overwrite (cache
pages, output buffers) are snapshotted before the call, as the seed did; the mapping to the
definition's inputs then goes through the adapters and ``writer.write``. A call that does not
fit its definition raises ``ValueError`` rather than writing a wrong workload.

Not mapped: the seed's Gated DeltaNet hooks (``chunk_gated_delta_rule_fwd``,
``TritonGDNKernel.packed_decode``) fed 48-head GDN definitions that are not ours (our GDN
definitions are imported from the MLSys 2026 contest).
"""

from __future__ import annotations

from typing import Any

import torch

from ._runtime import (
    Patches,
    bind,
    new_context,
    provenance,
    require_sglang,
)
from .adapters import (
    blocks_from_token_ids,
    compact_page_table,
    drop_zero_heads,
    sort_selected,
)
from .llm_steps import track_steps

QSA_INDEX = "qsa_index_topk_decode_qwen38_h4_d128_topk512_c4"
QSA_ATTENTION = "qsa_sparse_gqa_decode_qwen38_h24_kv2_d256_topk512_c4"
QSA_TOPK = 512


# --- Qwen3.8 Flash-Next ---------------------------------------------------------------------


def install_qwen_next(writer: Any) -> Patches:
    """QSA index (``QSAIndexer.select_decode_tokens``) and QSA sparse decode attention
    (``QwenSparseAttnBackend.forward_decode``) of Qwen3.8 Flash-Next."""
    require_sglang("qwen-next")
    from sglang.srt.layers.attention.qsa.qsa_indexer import QSAIndexer
    from sglang.srt.layers.attention.qwen_sparse_attn_backend import QwenSparseAttnBackend
    from sglang.srt.models.qwen4_exp import Qwen4ExpForConditionalGeneration

    patches, context = Patches("qwen-next"), new_context()
    track_steps(patches, context, Qwen4ExpForConditionalGeneration)

    def make_index(original):
        def select_decode_tokens(self, *args, **kwargs):
            state = context.get()
            if state is None:
                return original(self, *args, **kwargs)
            adapters = ["drop_zero_heads", "compact_page_table", "sort_selected"]
            record = provenance(
                "QSAIndexer.select_decode_tokens", state, adapters, layer_id=self.layer_id
            )
            if not writer.wants(QSA_INDEX, record):
                return original(self, *args, **kwargs)
            values = bind(original, (self, *args), kwargs)
            cache, lengths = values["compressed_cache"], values["compressed_lengths"].int()
            compact = compact_page_table(cache, values["compressed_page_table"], lengths)
            (query,), dropped = drop_zero_heads(values["q"], dim=1, num_real=self.index_n_heads)
            inputs = {
                "Q_idx": query.clone(),
                "Kc_pages": compact.pages.clone(),
                "page_table": compact.table,
                "num_complete_blocks": lengths.clone(),
            }
            result = original(self, *args, **kwargs)
            engine_ids = result
            if not values.get("defer_expansion"):
                engine_ids = blocks_from_token_ids(result, topk=QSA_TOPK)
                record["adapters"].insert(2, "blocks_from_token_ids")
            record.update(
                allocated_cache_shape=list(cache.shape),
                original_physical_page_ids=writer.tensor(
                    compact.physical, "original_physical_page_ids"
                ),
                engine_block_ids=writer.tensor(engine_ids, "engine_block_ids"),
                dropped_query_heads=dropped,
                adapter="Retain all live pages and remap their page IDs in first-use order; "
                "omit unreachable allocator pages.",
                query_adapter="Remove verified zero query heads inserted for the backend's "
                "eight-head tile.",
                output_adapter="Serialize the engine's selected set in increasing logical-ID "
                "order; preserve membership and -1 suffix padding.",
            )
            ordered = sort_selected(engine_ids.to(torch.int32)).ids
            writer.write(QSA_INDEX, inputs, {"block_ids": ordered}, record)
            return result

        return select_decode_tokens

    def make_attention(original):
        def forward_decode(self, *args, **kwargs):
            state = context.get()
            if state is None:
                return original(self, *args, **kwargs)
            values = bind(original, (self, *args), kwargs)
            layer, batch = values["layer"], values["forward_batch"]
            adapters = ["compact_page_table", "sort_selected"]
            record = provenance(
                "QwenSparseAttnBackend.forward_decode", state, adapters, layer_id=layer.layer_id
            )
            if not writer.wants(QSA_ATTENTION, record):
                return original(self, *args, **kwargs)
            query = values["q"].reshape(-1, 24, 256).clone()
            selected = values["topk_indices"]
            if selected.shape[-1] != QSA_TOPK:
                selected = blocks_from_token_ids(selected, topk=QSA_TOPK)
                record["adapters"].insert(0, "blocks_from_token_ids")
            blocks = sort_selected(selected.to(torch.int32)).ids
            result = original(self, *args, **kwargs)
            # After the call: the snapshot includes the current token's KV write.
            pool = self.token_to_kv_pool
            page = pool.qsa_compressed_page_size * self.compress_ratio
            keys = pool.get_key_buffer(layer.layer_id).reshape(-1, page, 2, 256)
            cached_values = pool.get_value_buffer(layer.layer_id).reshape_as(keys)
            lengths = batch.seq_lens.int()
            tokens = self.req_to_token_pool.req_to_token[batch.req_pool_indices.long()]
            compact = compact_page_table(keys, tokens[:, ::page] // page, lengths)
            physical = compact.physical.long().to(cached_values.device)
            record.update(
                allocated_cache_shape=list(keys.shape),
                original_physical_page_ids=writer.tensor(
                    compact.physical, "original_physical_page_ids"
                ),
                adapter="Snapshot after the current-token KV write; retain every live page "
                "and remap physical IDs in first-use order.",
            )
            inputs = {
                "Q": query,
                "K_pages": compact.pages,
                "V_pages": cached_values.index_select(0, physical),
                "page_table": compact.table,
                "block_ids": blocks,
                "context_lens": lengths.clone(),
            }
            writer.write(QSA_ATTENTION, inputs, {"output": result.reshape(-1, 24, 256)}, record)
            return result

        return forward_decode

    patches.wrap(QSAIndexer, "select_decode_tokens", make_index)
    patches.wrap(QwenSparseAttnBackend, "forward_decode", make_attention)
    return patches
