"""Stand-ins for the Qwen QSA sparse decode pair: the block indexer and sparse GQA.

Both use compacted paged caches, as captured: NP live pages, each row's page-table
entries are distinct pages followed by -1, the widest row uses all MP columns, and
every page is referenced (rows share pages only when NP is too small for them not
to, as with a reused prefix). Row lengths fill their last page partially.

Indexer: unit-normal queries (4 real heads), compressed keys are means of four
normalized keys (std 0.5). Sparse GQA: unit-normal Q/K/V, and block ids as the
indexer produces them: all of 0..n-1 when n = floor(L/4) <= 512, otherwise 512
distinct ids ascending; -1 padding at the end.
"""

from __future__ import annotations

import numpy as np
import torch

from .context import StandinContext

COMPRESSION = 4


def _page_counts(g: np.random.Generator, rows: int, widest: int, pages: int) -> list[int]:
    """Pages per row: the first row is the widest; the others get the rest, one at a time."""
    counts = [widest] + [1] * (rows - 1)
    for _ in range(pages - sum(counts)):
        open_rows = [row for row in range(1, rows) if counts[row] < widest]
        if not open_rows:
            break
        counts[open_rows[int(g.integers(len(open_rows)))]] += 1
    return counts


def _page_table(ctx: StandinContext, name: str) -> tuple[torch.Tensor, list[int]]:
    """[B, MP] int32 table over exactly NP live pages, and the page count of each row."""
    g = ctx.streams(name).generator
    rows, widest, pages = ctx.dims["B"], ctx.dims["MP"], ctx.dims["NP"]
    counts = _page_counts(g, rows, widest, pages)
    order = g.permutation(pages)
    table = np.full((rows, widest), -1, dtype=np.int32)
    fresh = 0
    for row, count in enumerate(counts):
        take = min(count, pages - fresh)
        table[row, :take] = order[fresh : fresh + take]
        fresh += take
        if take < count:  # no fresh pages left: reuse pages already given (a shared prefix)
            table[row, take:count] = g.choice(order[:fresh], size=count - take, replace=False)
    return torch.from_numpy(table), counts


def _lengths(g: np.random.Generator, counts: list[int], page: int) -> torch.Tensor:
    """A length per row whose last page is partly filled: ((count-1)*page, count*page]."""
    return torch.tensor([int(g.integers((c - 1) * page + 1, c * page + 1)) for c in counts])


def index(ctx: StandinContext) -> dict[str, torch.Tensor]:
    table, counts = _page_table(ctx, "page_table")
    blocks = _lengths(ctx.streams("num_complete_blocks").generator, counts, ctx.dims["P"])
    return {
        "Q_idx": ctx.streams("Q_idx").normal(ctx.shape("Q_idx"), torch.bfloat16),
        "Kc_pages": ctx.streams("Kc_pages").normal(ctx.shape("Kc_pages"), torch.bfloat16, 0.5),
        "page_table": table,
        "num_complete_blocks": blocks.to(torch.int32),
    }


def sparse_gqa(ctx: StandinContext) -> dict[str, torch.Tensor]:
    table, counts = _page_table(ctx, "page_table")
    lengths = _lengths(ctx.streams("context_lens").generator, counts, ctx.dims["P"])
    topk = ctx.dims["TOPK"]
    g = ctx.streams("block_ids").generator
    block_ids = torch.full((len(counts), topk), -1, dtype=torch.int32)
    for row, length in enumerate(lengths.tolist()):
        complete = length // COMPRESSION
        if complete <= topk:
            chosen = np.arange(complete)
        else:
            chosen = np.sort(g.choice(complete, size=topk, replace=False))
        block_ids[row, : len(chosen)] = torch.from_numpy(chosen.astype(np.int32))
    return {
        "Q": ctx.streams("Q").normal(ctx.shape("Q"), torch.bfloat16),
        "K_pages": ctx.streams("K_pages").normal(ctx.shape("K_pages"), torch.bfloat16),
        "V_pages": ctx.streams("V_pages").normal(ctx.shape("V_pages"), torch.bfloat16),
        "page_table": table,
        "block_ids": block_ids,
        "context_lens": lengths.to(torch.int32),
    }
