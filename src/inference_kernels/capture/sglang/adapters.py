"""Adapter steps from an SGLang engine call to a definition's inputs, as pure tensor functions.

Every function here takes and returns torch tensors: no SGLang import, no writer, no device
assumption. The hooks in ``qwen_image.py``, ``ltx.py``, ``qwen_next.py`` and
``deepseek.py`` call them; the unit tests in ``tests/capture/test_sglang_adapters.py``
check them on small hand-written values. Each docstring names the step of the seed
capture script that it mirrors (``scripts/capture_llm.py``, or ``scripts/capture_inputs.py``
for the diffusion models). The UE8M0 scale steps live in ``scales.py`` and are
re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch

from .scales import expand_scale_groups, ue8m0_bytes, ue8m0_from_float, ue8m0_from_words

__all__ = [
    "PAD",
    "CompactPages",
    "ExpertRows",
    "SortedSelection",
    "blocks_from_token_ids",
    "compact_page_table",
    "compact_token_pages",
    "drop_zero_heads",
    "expand_scale_groups",
    "expert_row_order",
    "image_ids_from_segments",
    "merge_expert_shards",
    "sort_selected",
    "take_rows",
    "ue8m0_bytes",
    "ue8m0_from_float",
    "ue8m0_from_words",
]

PAD = -1
"""The padding id of page tables, sparse indices, block ids and expert ids."""


# --- live-page compaction -------------------------------------------------------------------


class CompactPages(NamedTuple):
    pages: torch.Tensor  # the live pages of the cache, in first-use order
    table: torch.Tensor  # int32, the table (or indices) rewritten to compact page ids
    physical: torch.Tensor  # int32, the original page id of each compact page


def _first_use_unique(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct values of 1-D ``ids`` in order of first appearance, and for every entry
    of ``ids`` the position of its value in that list."""
    if ids.numel() == 0:
        return ids.new_empty(0), ids.new_empty(0)
    values, inverse = torch.unique(ids, return_inverse=True)
    positions = torch.arange(ids.numel(), device=ids.device)
    first = torch.full((values.numel(),), ids.numel(), dtype=torch.long, device=ids.device)
    first = first.scatter_reduce(0, inverse, positions, reduce="amin")
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel(), device=ids.device)
    return values[order], rank[inverse]


def compact_page_table(
    cache: torch.Tensor, table: torch.Tensor, lengths: torch.Tensor, page_size: int | None = None
) -> CompactPages:
    """Keep only the pages of ``cache`` that the captured sequences use, and renumber them.

    ``cache`` is ``[pages, page_size, ...]``; ``table[b, j]`` is the page holding items
    ``j*page_size .. (j+1)*page_size - 1`` of row ``b``, which has ``lengths[b]`` items.
    Row ``b`` uses its first ``ceil(lengths[b] / page_size)`` columns; the other columns are
    padding and come back as -1 whatever they held. The table keeps only as many columns as
    the longest row needs. Live pages are numbered in order of first use (row-major over the
    live entries); a page used twice, in one row or in two, keeps one copy and one id.
    A live entry that is negative or past the cache raises ``ValueError``.

    Mirrors the seed's ``_compact_pages`` (QSAIndexer.select_decode_tokens and
    QwenSparseAttnBackend.forward_decode hooks), which numbered pages in sorted order.
    ``physical`` lets a hook take the same pages from a second pool (the V cache).
    """
    page_size = cache.shape[1] if page_size is None else page_size
    if table.dim() != 2 or lengths.dim() != 1 or table.shape[0] != lengths.shape[0]:
        raise ValueError(f"table {list(table.shape)} and lengths {list(lengths.shape)} disagree")
    lengths = lengths.to(device=table.device, dtype=torch.long)
    if bool((lengths < 0).any()):
        raise ValueError("negative sequence length")
    live_columns = (lengths + page_size - 1) // page_size
    width = int(live_columns.max()) if lengths.numel() else 0
    if width > table.shape[1]:
        raise ValueError(f"rows need {width} page-table columns, the table has {table.shape[1]}")
    table = table[:, :width].long()
    live = torch.arange(width, device=table.device)[None, :] < live_columns[:, None]
    used = table[live]
    if bool(((used < 0) | (used >= cache.shape[0])).any()):
        raise ValueError(f"a live page-table entry is outside the {cache.shape[0]}-page cache")
    physical, compact = _first_use_unique(used)
    remapped = torch.full(table.shape, PAD, dtype=torch.int32, device=table.device)
    remapped[live] = compact.to(torch.int32)
    pages = cache.index_select(0, physical.to(cache.device))
    return CompactPages(pages, remapped, physical.to(torch.int32))


def compact_token_pages(
    cache: torch.Tensor, indices: torch.Tensor, lengths: torch.Tensor | None = None
) -> CompactPages:
    """Keep only the pages that token indices ``page * P + offset`` reach, and remap them.

    ``cache`` is ``[pages, P, ...]``. A negative index is padding and stays -1. With
    ``lengths`` (one per leading position of ``indices``, e.g. FlashMLA's ``topk_length``),
    index slots at or past the length become -1 too. Pages are numbered in first-use order;
    offsets within a page are kept. An index past the cache raises ``ValueError``.

    Mirrors the per-cache loop of the seed's ``mla`` hook (flash_mla_with_kvcache with an
    extra FP4 cache), which masked by ``topk_length`` and numbered pages in sorted order.
    """
    page_size = cache.shape[1]
    indices = indices.long()
    valid = indices >= 0
    if lengths is not None:
        lengths = lengths.to(device=indices.device, dtype=torch.long)
        lengths = lengths.reshape(*lengths.shape, *([1] * (indices.dim() - lengths.dim())))
        slots = torch.arange(indices.shape[-1], device=indices.device)
        valid &= slots < lengths
    used = indices[valid]
    pages_used = used // page_size
    if bool((pages_used >= cache.shape[0]).any()):
        raise ValueError(f"an index reaches past the {cache.shape[0]}-page cache")
    physical, compact = _first_use_unique(pages_used)
    remapped = torch.full(indices.shape, PAD, dtype=torch.int32, device=indices.device)
    remapped[valid] = (compact * page_size + used % page_size).to(torch.int32)
    pages = cache.index_select(0, physical.to(cache.device))
    return CompactPages(pages, remapped, physical.to(torch.int32))


# --- zero-head removal ----------------------------------------------------------------------


def drop_zero_heads(
    tensor: torch.Tensor, *companions: torch.Tensor, dim: int = 1, num_real: int | None = None
) -> tuple[tuple[torch.Tensor, ...], list[int]]:
    """Drop the attention heads along ``dim`` of ``tensor`` that are entirely zero.

    With ``num_real``, the heads from ``num_real`` on are padding: they must all be zero
    (else ``ValueError``) and are the ones dropped, while a real head that happens to be zero
    is kept. Without it, every all-zero head is dropped. ``companions`` (e.g. the output)
    lose the same heads along the same ``dim``. Returns ``((tensor, *companions), dropped)``.

    Mirrors the seed's QSA index hook, which cut the backend's eight-head query tile back to
    the indexer's four real heads after checking that the other four were zero.
    """
    heads = tensor.shape[dim]
    nonzero = (tensor.movedim(dim, 0).reshape(heads, -1) != 0).any(dim=1)
    if num_real is None:
        keep = nonzero.nonzero().flatten()
    else:
        if not 0 <= num_real <= heads:
            raise ValueError(f"num_real={num_real} with {heads} heads")
        if bool(nonzero[num_real:].any()):
            raise ValueError(f"padding heads {num_real}..{heads - 1} are not all zero")
        keep = torch.arange(num_real, device=tensor.device)
    kept_set = set(keep.tolist())
    dropped = [head for head in range(heads) if head not in kept_set]
    kept = tuple(t.index_select(dim, keep.to(t.device)) for t in (tensor, *companions))
    return kept, dropped


# --- expert-shard gathering -----------------------------------------------------------------


class ExpertRows(NamedTuple):
    rows: dict[str, torch.Tensor]  # each row tensor, valid rows only, sorted by expert
    expert_id: torch.Tensor  # int32 [M], global expert ids, ascending
    order: torch.Tensor  # int64 [M], rows taken from the concatenated shard rows


def expert_row_order(
    local_ids: Sequence[torch.Tensor], experts_per_shard: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Global expert ids of the valid rows of all shards, ascending, and where each row is.

    ``local_ids[r]`` holds shard ``r``'s local expert id of each row, -1 for a padding row.
    Expert ``e`` of shard ``r`` is global expert ``r * experts_per_shard + e``. Rows with -1
    are dropped; the rest are sorted by global id, stably, so rows of one expert keep their
    order. ``order`` indexes the concatenation of all shards' rows (padding included), so
    ``take_rows`` can apply it to any per-row tensor, inputs now or outputs later.

    Mirrors the seed's ``gemm`` hook (DeepGEMM grouped_gemm_nt_f8f8bf16_contig): valid rows
    of each expert-parallel rank, offset by rank, gathered, then ``argsort(stable=True)``.
    """
    global_ids, rows = [], []
    offset = 0
    for shard, ids in enumerate(local_ids):
        ids = ids.flatten().long().cpu()
        if bool(((ids < PAD) | (ids >= experts_per_shard)).any()):
            raise ValueError(f"shard {shard} has expert ids outside -1..{experts_per_shard - 1}")
        valid = ids >= 0
        global_ids.append(ids[valid] + shard * experts_per_shard)
        rows.append(valid.nonzero().flatten() + offset)
        offset += ids.numel()
    ids = torch.cat(global_ids) if global_ids else torch.empty(0, dtype=torch.long)
    rows_cat = torch.cat(rows) if rows else torch.empty(0, dtype=torch.long)
    order = torch.argsort(ids, stable=True)
    return ids[order].to(torch.int32), rows_cat[order]


def take_rows(shards: Sequence[torch.Tensor], order: torch.Tensor) -> torch.Tensor:
    """Concatenate per-shard row tensors along dim 0 and take the rows ``order`` names."""
    joined = torch.cat([shard.cpu() for shard in shards], dim=0)
    return joined.index_select(0, order.long())


def merge_expert_shards(
    rows: Mapping[str, Sequence[torch.Tensor]],
    local_ids: Sequence[torch.Tensor],
    experts_per_shard: int,
) -> ExpertRows:
    """Merge per-shard expert rows (e.g. activations and their scales) into one task.

    ``rows[name][r]`` is shard ``r``'s tensor with one row per entry of ``local_ids[r]``.
    Returns the valid rows of every tensor sorted by global expert id (see
    ``expert_row_order``), the ids, and the permutation, which reorders the engine's output
    rows the same way: ``take_rows(outputs, merged.order)``.
    """
    for name, shards in rows.items():
        if len(shards) != len(local_ids):
            raise ValueError(f"{name}: {len(shards)} shards for {len(local_ids)} id shards")
        for shard, ids in zip(shards, local_ids, strict=True):
            if shard.shape[0] != ids.numel():
                raise ValueError(f"{name}: {shard.shape[0]} rows for {ids.numel()} ids")
    expert_id, order = expert_row_order(local_ids, experts_per_shard)
    merged = {name: take_rows(shards, order) for name, shards in rows.items()}
    return ExpertRows(merged, expert_id, order)


# --- sorted output serialization ------------------------------------------------------------


class SortedSelection(NamedTuple):
    ids: torch.Tensor  # ids ascending per row, padding last
    companions: tuple[torch.Tensor, ...]  # each companion permuted with the ids
    order: torch.Tensor  # int64, the per-row permutation applied


def sort_selected(
    ids: torch.Tensor, *companions: torch.Tensor, require_distinct: bool = True
) -> SortedSelection:
    """Serialize a selected set in canonical order: ids ascending along the last dim.

    -1 entries are padding and move to the end of their row; ``companions`` (e.g. routing
    weights) are permuted alongside, padding slots included. The sort is stable. With
    ``require_distinct``, an id repeated within a row raises ``ValueError``; other negative
    ids raise too. The dtype of ``ids`` is kept.

    Mirrors the seed's ``topk`` hook (router ids ascending, weights permuted with them) and
    the QSA index hook's ``output_adapter`` (ascending logical block ids, -1 suffix).
    """
    key = ids.long()
    if bool((key < PAD).any()):
        raise ValueError("ids below -1")
    last = torch.iinfo(torch.int64).max
    key = key.masked_fill(key == PAD, last)
    order = torch.argsort(key, dim=-1, stable=True)
    ordered = key.gather(-1, order)
    if require_distinct and ordered.shape[-1] > 1:
        repeated = (ordered[..., 1:] == ordered[..., :-1]) & (ordered[..., 1:] != last)
        if bool(repeated.any()):
            raise ValueError("an id is selected twice in one row")
    return SortedSelection(
        ids.gather(-1, order), tuple(c.gather(-1, order) for c in companions), order
    )


def blocks_from_token_ids(tokens: torch.Tensor, topk: int, block_size: int = 4) -> torch.Tensor:
    """Block ids from a token list expanded block by block (``4b .. 4b+3`` per block ``b``).

    Takes the first token of each of the first ``topk`` groups of ``block_size`` and divides;
    a -1 group stays -1. A first token that is not a multiple of ``block_size`` raises.
    Mirrors the seed's ``result[:, :2048:4] // 4`` for QSA outputs returned already expanded.
    """
    if tokens.shape[-1] < topk * block_size:
        raise ValueError(f"{tokens.shape[-1]} tokens cannot hold {topk} blocks")
    first = tokens[..., : topk * block_size : block_size].long()
    valid = first >= 0
    if bool((first[valid] % block_size != 0).any()):
        raise ValueError("token list is not expanded block by block")
    return torch.where(valid, first // block_size, PAD).to(torch.int32)


# --- diffusion segments ---------------------------------------------------------------------


def image_ids_from_segments(segments: Sequence[tuple[int, int, bool]], length: int) -> torch.Tensor:
    """``image_ids`` of the block-causal prefix definition from the engine's segment list.

    ``segments`` are ``(start, end, is_image)`` runs that tile ``0 .. length``; text runs get
    -1 and the k-th image run gets ``k``. Mirrors the seed's ``_block_attention``
    (Qwen-Image ``QwenImage21Attention`` prefix segments).
    """
    ids = torch.full((length,), PAD, dtype=torch.int32)
    cursor, image = 0, 0
    for start, end, is_image in segments:
        if start != cursor or end <= start:
            raise ValueError(f"segment ({start}, {end}) does not continue at {cursor}")
        if is_image:
            ids[start:end] = image
            image += 1
        cursor = end
    if cursor != length:
        raise ValueError(f"segments cover {cursor} of {length} positions")
    return ids
