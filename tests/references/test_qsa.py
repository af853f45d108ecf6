"""QSA index top-k selection and sparse GQA decode references vs naive loops."""

from __future__ import annotations

import math

import pytest
import torch

INDEX = "qsa_index_topk_decode_qwen38_h4_d128_topk512_c4"
SPARSE = "qsa_sparse_gqa_decode_qwen38_h24_kv2_d256_topk512_c4"
TOPK = 512

# ----------------------------------------------------------------------------- index


def paged_index_keys(n_blocks, page, generator, key_of_block, garbage_pages=3):
    """Kc_pages and a shuffled page table holding key_of_block(j) for block j at
    Kc_pages[page_table[j // P], j % P]; pages nobody maps hold large garbage."""
    used = -(-n_blocks // page)
    total = used + garbage_pages
    physical = torch.randperm(total, generator=generator)[:used]
    Kc = (torch.randn(total, page, 1, 128, generator=generator) * 50).bfloat16()
    for j in range(n_blocks):
        Kc[physical[j // page], j % page, 0] = key_of_block(j)
    table = torch.full((used + 2,), -1, dtype=torch.int32)  # -1 past the row
    table[:used] = physical.to(torch.int32)
    return Kc, table


def naive_topk(scores):
    """Best TOPK ids by (score descending, id ascending), returned ascending, -1 padded."""
    order = sorted(range(len(scores)), key=lambda j: (-scores[j], j))
    chosen = sorted(order[:TOPK])
    return chosen + [-1] * (TOPK - len(chosen))


def integer_scores(q, keys):
    """sum_h relu(q_h . k_j) on integer-valued tensors, exactly (Python ints)."""
    dots = (keys.long() @ q.long().T).tolist()  # [n, H]
    return [sum(max(d, 0) for d in row) for row in dots]


def test_index_up_to_topk_blocks_selects_all_without_scoring(reference, const_axes):
    axes = const_axes(INDEX)
    assert (axes["H"], axes["D"], axes["TOPK"]) == (4, 128, TOPK)
    page = 16
    rows = [0, 1, 5, 511, 512]
    NP = 33
    Q = (torch.randn(len(rows), 4, 128) * 1e3).bfloat16()
    Kc = (torch.randn(NP, page, 1, 128) * 1e3).bfloat16()  # garbage, never scored
    table = torch.full((len(rows), 33), -1, dtype=torch.int32)  # no valid page anywhere
    out = reference(INDEX)(Q, Kc, table, torch.tensor(rows, dtype=torch.int32))
    assert out.dtype == torch.int32 and out.shape == (len(rows), TOPK)
    for r, n in enumerate(rows):
        assert out[r].tolist() == list(range(n)) + [-1] * (TOPK - n)


@pytest.mark.parametrize("cut_value", [0, 3])
def test_index_ties_at_the_cut_keep_lowest_ids(reference, cut_value):
    """n = 600 > 512: 480 blocks score above `cut_value`, 120 score exactly `cut_value`.

    Only 32 of the tied blocks fit; they must be the 32 lowest tied ids. Score 0 comes
    from four non-positive dot products (relu), score 3 from exact small integers.
    """
    generator = torch.Generator().manual_seed(10)
    n, page = 600, 16
    q = torch.zeros(4, 128)
    for h in range(4):
        q[h, h] = 1.0  # head h reads dim h, so q_h . k = k[h]
    tied = sorted(torch.randperm(n, generator=generator)[:120].tolist())
    tied_set = set(tied)

    def key(j):
        k = torch.zeros(128)
        k[4:] = 7.0  # ignored by every head
        if j in tied_set:
            if cut_value == 0:
                k[:4] = torch.tensor([-1.0, -2.0, 0.0, -5.0])  # all dots <= 0
            else:
                k[:4] = torch.tensor([2.0, 1.0, -4.0, -1.0])  # relu sum 3, plain sum -2
        else:
            k[:4] = torch.tensor([4.0, float(j % 7), -3.0, 0.0])  # relu sum >= 4
        return k.bfloat16()

    Kc, table = paged_index_keys(n, page, generator, key)
    out = reference(INDEX)(
        q[None].bfloat16(), Kc, table[None], torch.tensor([n], dtype=torch.int32)
    )
    expected = sorted(set(range(n)) - tied_set) + tied[:32]
    assert out[0].tolist() == sorted(expected)
    assert out[0, -1].item() != -1


def test_index_random_integer_keys_match_naive(reference):
    """Integer keys make every score exact, so the naive ranking is unambiguous; ties
    are frequent and resolved by lower id. Two scored rows and one unscored row."""
    generator = torch.Generator().manual_seed(11)
    page = 16
    sizes = [700, 3, 530]
    Q = torch.randint(-2, 3, (3, 4, 128), generator=generator).bfloat16()
    tables, pools, expected, all_keys = [], [], [], []
    offset = 0
    for r, n in enumerate(sizes):
        keys = torch.randint(-2, 3, (n, 128), generator=generator).bfloat16()
        all_keys.append(keys)
        Kc, table = paged_index_keys(n, page, generator, lambda j, keys=keys: keys[j])
        pools.append(Kc)
        tables.append(torch.where(table >= 0, table + offset, table))
        offset += Kc.shape[0]
        if n <= TOPK:
            expected.append(list(range(n)) + [-1] * (TOPK - n))
        else:
            expected.append(naive_topk(integer_scores(Q[r], keys)))
    width = max(t.shape[0] for t in tables)
    table = torch.full((3, width), -1, dtype=torch.int32)
    for r, t in enumerate(tables):
        table[r, : t.shape[0]] = t
    out = reference(INDEX)(Q, torch.cat(pools), table, torch.tensor(sizes, dtype=torch.int32))
    assert out.tolist() == expected
    # The case is sharp: the cut falls inside a run of equal scores, and scoring relu of
    # the summed dot products (instead of the sum of relus) would select other blocks.
    ranked = sorted(integer_scores(Q[0], all_keys[0]), reverse=True)
    assert ranked[TOPK - 1] == ranked[TOPK]
    plain = [max(sum(row), 0) for row in (all_keys[0].long() @ Q[0].long().T).tolist()]
    assert naive_topk(plain) != expected[0]


def _cut_rows(dataset):
    """Four rows of 600 blocks (the last of 300): 511 blocks score high, two blocks X and Y
    meet at the cut, the rest are exact zeros (all dots clearly negative). Row 0: X and Y
    clearly apart. Row 1: their dot products (8 and 8 + 2^-7, each summed from terms near
    1,000) within what another FP32 order may move them. Row 2: no Y; the cut falls among
    exact zeros, where lower ids win in any order. Row 3: 300 blocks, nothing scored."""
    from inference_kernels.materialize.references import run_reference

    definition = dataset.definitions[INDEX]
    tolerance = dataset.tasks[INDEX].tolerance
    assert tolerance.ambiguity.outputs == ["block_ids"]
    assert (tolerance.atol, tolerance.rtol) == (0.0, 0.0)
    generator = torch.Generator().manual_seed(12)
    page, n, cut_x, cut_y = 16, 600, 300, 301
    Q = torch.zeros(4, 4, 128)
    Q[:, 0, :3] = 1.0  # head 0 sums dims 0-2 of each key; heads 1-3 read nothing
    cut_keys = {
        0: ([10.0], [5.0]),
        1: ([1024.0, -1016.0], [1024.0, -1016.0, 2.0**-7]),
        2: ([-50.0], [-50.0]),
    }

    def key_of(row):
        def key(j):
            k = torch.zeros(128)
            if j in (cut_x, cut_y):
                values = cut_keys[row][j - cut_x]
                k[: len(values)] = torch.tensor(values)
            elif j < 513:  # with X and Y, the 511 high blocks
                k[0] = 100.0
            else:
                k[0] = -50.0
            return k.bfloat16()

        return key

    sizes = [n, n, n, 300]
    pools, tables, offset = [], [], 0
    for row, size in enumerate(sizes):
        Kc, table = paged_index_keys(size, page, generator, key_of(min(row, 2)))
        pools.append(Kc)
        tables.append(torch.where(table >= 0, table + offset, table))
        offset += Kc.shape[0]
    table = torch.full((4, max(t.shape[0] for t in tables)), -1, dtype=torch.int32)
    for row, t in enumerate(tables):
        table[row, : t.shape[0]] = t
    inputs = [Q.bfloat16(), torch.cat(pools), table, torch.tensor(sizes, dtype=torch.int32)]
    (ids,) = run_reference(definition, inputs)
    high = [j for j in range(513) if j not in (cut_x, cut_y)]
    assert ids[0].tolist() == sorted(high + [cut_x])
    assert ids[1].tolist() == sorted(high + [cut_y])
    assert ids[2].tolist() == sorted(high + [cut_x])  # the lowest of the zeros
    return definition, tolerance, inputs, ids, (cut_x, cut_y)


def _swapped(ids, row, old, new):
    other = ids.clone()
    chosen = sorted(set(other[row].tolist()) - {old} | {new})
    other[row] = torch.tensor(chosen, dtype=torch.int32)
    return other


def test_index_ambiguous_rows_are_those_another_summation_order_may_change(dataset):
    """On the rows of ``_cut_rows`` only row 1 is marked; a kernel that picks the other of X
    and Y there passes the element-wise comparison, the same swap on row 0 fails, and so
    does a higher id among row 2's zeros."""
    from inference_kernels.acceptance import compare
    from inference_kernels.materialize.references import ambiguous_rows

    definition, tolerance, inputs, ids, (cut_x, cut_y) = _cut_rows(dataset)
    assert tolerance.ambiguity.outputs == ["block_ids"]
    assert (tolerance.atol, tolerance.rtol) == (0.0, 0.0)
    high = [j for j in range(513) if j not in (cut_x, cut_y)]
    assert ids[0].tolist() == sorted(high + [cut_x])
    assert ids[1].tolist() == sorted(high + [cut_y])
    assert ids[2].tolist() == sorted(high + [cut_x])  # the lowest of the zeros
    rows = ambiguous_rows(definition, tolerance, inputs, [ids])
    assert rows.tolist() == [False, True, False, False]
    assert compare(_swapped(ids, 1, cut_y, cut_x), ids, tolerance, rows).passed
    assert not compare(_swapped(ids, 1, cut_y, cut_x), ids, tolerance).passed  # without the rows
    assert not compare(_swapped(ids, 0, cut_x, cut_y), ids, tolerance, rows).passed
    assert not compare(_swapped(ids, 2, cut_x, 599), ids, tolerance, rows).passed


def test_index_marked_rows_must_still_hold_a_selection_some_order_gives(dataset):
    """The task's accept function (valid_selection) on the rows of ``_cut_rows``: the
    reference's ids and the other side of row 1's cut are accepted; on row 1, a zero block
    in place of Y, a repeated id, ids out of order, an id past the row's blocks and a -1
    are not; on row 2 a higher id among the exact zeros is not, and row 3 (nothing scored)
    takes only 0..299 then -1. Before the set check a marked row went unchecked: any of
    these passed there."""
    from inference_kernels.materialize.references import ambiguous_rows, rejected_rows

    definition, tolerance, inputs, ids, (cut_x, cut_y) = _cut_rows(dataset)
    assert tolerance.ambiguity.accept == "valid_selection"
    marked = ambiguous_rows(definition, tolerance, inputs, [ids])
    everything = torch.ones(4, dtype=torch.bool)

    def rejected(produced):
        return rejected_rows(definition, tolerance, inputs, [produced], everything).tolist()

    assert rejected(ids) == [False] * 4
    assert rejected(_swapped(ids, 1, cut_y, cut_x)) == [False] * 4
    assert rejected(_swapped(ids, 0, cut_x, cut_y)) == [True, False, False, False]
    assert rejected(_swapped(ids, 1, cut_y, 599)) == [False, True, False, False]
    assert rejected(_swapped(ids, 2, cut_x, 599)) == [False, False, True, False]
    broken = {
        "repeated": lambda r: torch.cat((r[:1], r[:-1])),
        "descending": lambda r: r.flip(0),
        "past the blocks": lambda r: torch.cat((r[:-1], torch.tensor([600], dtype=r.dtype))),
        "padded": lambda r: torch.cat((r[:-1], torch.tensor([-1], dtype=r.dtype))),
    }
    for name, change in broken.items():
        produced = ids.clone()
        produced[1] = change(produced[1])
        assert rejected(produced) == [False, True, False, False], name
    short = ids.clone()
    short[3, 299] = -1
    assert rejected(short) == [False, False, False, True]
    # through the judge only the marked rows are set-checked (the others compared exactly)
    assert rejected_rows(definition, tolerance, inputs, [short], marked).tolist() == [False] * 4


# ----------------------------------------------------------------------------- sparse GQA


def naive_sparse_gqa(Q, K_pages, V_pages, page_table, block_ids, context_lens):
    """Each row and head on its own: the token list of the description, softmax / 16."""
    rows, heads, dim = Q.shape
    page = K_pages.shape[1]
    group = heads // K_pages.shape[2]
    out = torch.zeros(rows, heads, dim, dtype=torch.float64)
    for r in range(rows):
        length = int(context_lens[r])
        tokens = []
        for j in block_ids[r].tolist():
            if j >= 0:
                tokens += [t for t in range(4 * j, 4 * j + 4) if t < length]
        tokens += list(range(4 * (length // 4), length))
        for h in range(heads):
            kv = h // group
            keys = torch.stack([K_pages[page_table[r, t // page], t % page, kv] for t in tokens])
            values = torch.stack([V_pages[page_table[r, t // page], t % page, kv] for t in tokens])
            logits = (keys.double() @ Q[r, h].double()) / math.sqrt(dim)
            weights = torch.softmax(logits, dim=0)
            out[r, h] = weights @ values.double()
    return out


def gqa_inputs(generator, lengths, page, heads=24, kv_heads=2, dim=256):
    rows = len(lengths)
    columns = max(-(-n // page) for n in lengths) + 1
    pages_needed = sum(-(-n // page) for n in lengths)
    NP = pages_needed + 2
    physical = torch.randperm(NP, generator=generator)
    table = torch.full((rows, columns), -1, dtype=torch.int32)
    used = 0
    for r, n in enumerate(lengths):
        count = -(-n // page)
        table[r, :count] = physical[used : used + count].to(torch.int32)
        used += count
    Q = torch.randn(rows, heads, dim, generator=generator).bfloat16()
    K = torch.randn(NP, page, kv_heads, dim, generator=generator).bfloat16()
    V = torch.randn(NP, page, kv_heads, dim, generator=generator).bfloat16()
    return Q, K, V, table


def block_row(ids):
    return ids + [-1] * (TOPK - len(ids))


def test_sparse_gqa_matches_naive(reference, const_axes):
    axes = const_axes(SPARSE)
    assert (axes["H"], axes["HKV"], axes["D"], axes["TOPK"]) == (24, 2, 256, TOPK)
    generator = torch.Generator().manual_seed(20)
    page = 8
    # L = 23: 5 complete blocks, tail 20..22. L = 3: tail only. L = 32: no tail.
    # L = 41: blocks over several pages, tail 40.
    lengths = [23, 3, 32, 41]
    blocks = [
        block_row([0, 3, 4]),
        block_row([]),
        block_row([1, 2, 7]),
        block_row([0, 2, 5, 6, 9]),
    ]
    Q, K, V, table = gqa_inputs(generator, lengths, page)
    block_ids = torch.tensor(blocks, dtype=torch.int32)
    context = torch.tensor(lengths, dtype=torch.int32)
    out = reference(SPARSE)(Q, K, V, table, block_ids, context)
    assert out.dtype == torch.bfloat16 and out.shape == Q.shape
    expected = naive_sparse_gqa(Q, K, V, table, block_ids, context)
    torch.testing.assert_close(out.double(), expected, atol=8e-3, rtol=8e-3)


def test_sparse_gqa_attends_exactly_the_listed_tokens(reference):
    """Q = 0: uniform weights. V's dim t is 1 for token t, so output dim t is 1/n on
    exactly the attended tokens. Row L = 23, blocks [1, 4]: tokens 4..7, 16..19, 20..22.
    Heads 0..11 read KV head 0, heads 12..23 KV head 1 (V of head 1 is negated)."""
    page, length = 8, 23
    Q = torch.zeros(1, 24, 256, dtype=torch.bfloat16)
    K = torch.randn(3, page, 2, 256).bfloat16()
    V = torch.zeros(3, page, 2, 256)
    table = torch.tensor([[2, 0, 1, -1]], dtype=torch.int32)
    for t in range(3 * page):
        V[table[0, t // page], t % page, 0, t] = 1.0
        V[table[0, t // page], t % page, 1, t] = -1.0
    block_ids = torch.tensor([block_row([1, 4])], dtype=torch.int32)
    out = reference(SPARSE)(Q, K, V.bfloat16(), table, block_ids, torch.tensor([length]))
    attended = [4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22]
    expected = torch.zeros(24, 256)
    expected[:12, attended] = 1.0 / len(attended)
    expected[12:, attended] = -1.0 / len(attended)
    torch.testing.assert_close(out[0].float(), expected, atol=2e-3, rtol=0)


def test_a_block_past_the_complete_blocks_is_outside_the_contract(dataset):
    """L = 22 and block id 5 = L // 4: its tokens 20..23 would overlap the tail 20, 21.

    The contract excludes such ids (they are in [0, floor(L/4))); the definition's
    constraint rejects the input, so check reports it instead of judging on it."""
    from inference_kernels.dataset import constraints

    rule = "(block_ids < (context_lens // 4)[:, None]).all()"
    assert rule in dataset.definitions[SPARSE].constraints
    values = {"block_ids": torch.tensor([block_row([0, 5])]), "context_lens": torch.tensor([22])}
    assert constraints.evaluate(rule, values) is False
    values["block_ids"] = torch.tensor([block_row([0, 4])])
    assert constraints.evaluate(rule, values) is True


def _one_row(keys, Q):
    """One row over ``keys`` [n, 128] (pages in order), bf16 inputs for the index."""
    n, page = keys.shape[0], 16
    pool = torch.zeros(-(-n // page), page, 1, 128)
    pool.view(-1, 128)[:n] = keys
    table = torch.arange(pool.shape[0], dtype=torch.int32)[None]
    return [Q.bfloat16(), pool.bfloat16(), table, torch.tensor([n], dtype=torch.int32)]


def test_index_set_check_cuts_ties_at_zero_and_holds_below_the_normal_range(dataset):
    """Found by a red-team trial of the set check. Block X (511) has a dot of -2^-7 summed
    from terms near 1,000: 0 in the reference's order, maybe above 0 in another, never
    below (a sum of relus). Keeping the exact zero 512 over X is no order's selection (X
    beats it or ties, and the lower id wins a tie); it was accepted. And with products
    below FP32's normal range (block 599: |q| and |k| near 2^-75, exact dot -6 * 2^-149)
    the reference's order scores 599 above 0 and keeps it: the bound had underflowed to 0
    there, so 599 counted as an exact zero kept over lower ids, and the reference's own
    output was rejected, as was the sequential order without fused multiply-adds."""
    from inference_kernels.materialize.references import ambiguous_rows, rejected_rows

    definition, tolerance = dataset.definitions[INDEX], dataset.tasks[INDEX].tolerance
    keys = torch.zeros(600, 128)
    keys[:511, 0] = 100.0
    keys[511, :3] = torch.tensor([1024.0, -1024.0, -(2.0**-7)])
    keys[512:, 0] = -50.0  # exact zeros: every dot clearly negative, or every product 0
    Q = torch.zeros(1, 4, 128)
    Q[0, 0, :3] = 1.0

    def rejected(inputs, marked, tail):
        produced = torch.tensor([list(range(511)) + [tail]], dtype=torch.int32)
        return rejected_rows(definition, tolerance, inputs, [produced], marked).tolist()

    inputs = _one_row(keys, Q)
    (ids,) = run_reference_of(definition, inputs)
    marked = ambiguous_rows(definition, tolerance, inputs, [ids])
    assert ids[0, -1] == 511 and marked.tolist() == [True]
    assert rejected(inputs, marked, 511) == [False]  # the reference's
    assert rejected(inputs, marked, 512) == [True]  # an exact zero kept over X
    assert rejected(inputs, marked, 513) == [True]

    keys[599, 3:75] = 1.5 * 2.0**-75
    keys[599, 75:123] = -2.5 * 2.0**-75
    Q[0, 1, 3:] = 2.0**-75  # head 1 reads only block 599's small values
    inputs = _one_row(keys, Q)
    (ids,) = run_reference_of(definition, inputs)
    marked = ambiguous_rows(definition, tolerance, inputs, [ids])
    assert ids[0, -1] == 599 and marked.tolist() == [True]
    assert rejected(inputs, marked, 599) == [False]  # the reference's own output
    q, k = inputs[0][0].float(), inputs[1].view(-1, 128)[:600].float()
    products = k[:, None, :] * q[None, :, :]  # rounded to FP32, then summed in order
    sums = torch.zeros(600, 4)
    for d in range(128):
        sums = sums + products[..., d]
    assert float(sums[599, 1]) > 0  # this order keeps 599 too
    assert rejected(inputs, marked, 512) == [True]


def run_reference_of(definition, inputs):
    from inference_kernels.materialize.references import run_reference

    return run_reference(definition, inputs)
