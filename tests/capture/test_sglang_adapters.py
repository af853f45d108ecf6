"""The SGLang capture adapters on small hand-checked values (expected tensors written out)."""

import pytest
import torch

from inference_kernels.capture.sglang import adapters as A


def i32(rows):
    return torch.tensor(rows, dtype=torch.int32)


def u8(values):
    return torch.tensor(values, dtype=torch.uint8)


# --- live-page compaction -------------------------------------------------------------------


def test_page_table_compaction_first_use_order_repeats_and_padding():
    cache = torch.arange(12).reshape(6, 2)  # page p holds items 2p, 2p+1
    table = i32([[4, 1, 4, 0], [1, 5, 3, 3]])  # row 1 col 2 is stale, col 3 unused
    out = A.compact_page_table(cache, table, i32([5, 3]))
    # live entries row-major: 4, 1, 4 | 1, 5 -> pages 4, 1, 5 become 0, 1, 2
    assert torch.equal(out.physical, i32([4, 1, 5]))
    assert torch.equal(out.pages, torch.tensor([[8, 9], [2, 3], [10, 11]]))
    assert torch.equal(out.table, i32([[0, 1, 0], [1, 2, -1]]))
    assert out.table.dtype == torch.int32


def test_page_table_compaction_empty_row_is_all_padding():
    cache = torch.arange(8).reshape(4, 2)
    out = A.compact_page_table(cache, i32([[3, 3], [2, 0]]), i32([0, 4]))
    assert torch.equal(out.table, i32([[-1, -1], [0, 1]]))
    assert torch.equal(out.physical, i32([2, 0]))
    assert torch.equal(out.pages, torch.tensor([[4, 5], [0, 1]]))


@pytest.mark.parametrize(
    ("table", "lengths"),
    [
        ([[2, -1]], [3]),  # a live column without a page
        ([[6]], [1]),  # a page past the 6-page cache
        ([[0, 1]], [7]),  # 7 items need 4 columns
    ],
)
def test_page_table_compaction_rejects_bad_live_entries(table, lengths):
    with pytest.raises(ValueError):
        A.compact_page_table(torch.zeros(6, 2), i32(table), i32(lengths))


def test_token_index_compaction_with_lengths():
    cache = torch.arange(20).reshape(5, 4)  # P = 4
    indices = i32([[[9, -1, 2, 11, 17]]])
    out = A.compact_token_pages(cache, indices, i32([4]))  # slot 4 (17) is past the length
    # pages used: 2 (9, 11) first, then 0 (2)
    assert torch.equal(out.physical, i32([2, 0]))
    assert torch.equal(out.pages, torch.tensor([[8, 9, 10, 11], [0, 1, 2, 3]]))
    assert torch.equal(out.table, i32([[[1, -1, 6, 3, -1]]]))
    flat = out.pages.flatten()
    assert [int(flat[i]) for i in (1, 6, 3)] == [9, 2, 11]


def test_token_index_compaction_without_lengths_and_past_cache():
    cache = torch.arange(20).reshape(5, 4)
    out = A.compact_token_pages(cache, i32([[9, 17, 10]]))
    assert torch.equal(out.physical, i32([2, 4]))
    assert torch.equal(out.table, i32([[1, 5, 2]]))
    with pytest.raises(ValueError):
        A.compact_token_pages(cache, i32([[20]]))


# --- zero-head removal ----------------------------------------------------------------------


def test_drop_padding_heads_with_real_count():
    q = torch.zeros(2, 4, 3)
    q[:, 0] = 1.0
    q[0, 1, 2] = -2.0
    (kept,), dropped = A.drop_zero_heads(q, dim=1, num_real=2)
    assert dropped == [2, 3]
    expected = torch.tensor(
        [[[1.0, 1.0, 1.0], [0.0, 0.0, -2.0]], [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]]
    )
    assert torch.equal(kept, expected)


def test_drop_padding_heads_keeps_a_zero_real_head():
    q = torch.zeros(1, 4, 2)
    q[0, 0] = 3.0
    (kept,), dropped = A.drop_zero_heads(q, num_real=2)
    assert dropped == [2, 3]
    assert torch.equal(kept, torch.tensor([[[3.0, 3.0], [0.0, 0.0]]]))


def test_drop_padding_heads_rejects_nonzero_padding():
    q = torch.zeros(1, 4, 2)
    q[0, 3, 1] = 1e-30
    with pytest.raises(ValueError):
        A.drop_zero_heads(q, num_real=2)


def test_drop_all_zero_heads_with_companion():
    q = torch.tensor([[[1.0], [0.0], [2.0], [0.0]]])  # [B=1, H=4, D=1]
    out = torch.tensor([[10.0, 11.0, 12.0, 13.0]])  # [B=1, H=4]
    (kept_q, kept_out), dropped = A.drop_zero_heads(q, out, dim=1)
    assert dropped == [1, 3]
    assert torch.equal(kept_q, torch.tensor([[[1.0], [2.0]]]))
    assert torch.equal(kept_out, torch.tensor([[10.0, 12.0]]))


# --- expert-shard gathering -----------------------------------------------------------------


def test_merge_expert_shards_drops_padding_and_sorts_stably():
    ids = [i32([1, -1, 0, 1]), i32([-1, -1]), i32([0, 1, 0])]  # shard 1 is all padding
    rows = {
        "A": [
            torch.tensor([[10], [11], [12], [13]]),
            torch.tensor([[20], [21]]),
            torch.tensor([[30], [31], [32]]),
        ]
    }
    merged = A.merge_expert_shards(rows, ids, experts_per_shard=2)
    # global ids by concatenated position: 0->1, 2->0, 3->1, 6->4, 7->5, 8->4
    assert torch.equal(merged.expert_id, i32([0, 1, 1, 4, 4, 5]))
    assert merged.order.tolist() == [2, 0, 3, 6, 8, 7]
    assert torch.equal(merged.rows["A"], torch.tensor([[12], [10], [13], [30], [32], [31]]))
    outputs = [torch.tensor([[100], [101], [102], [103]]), torch.tensor([[200], [201]])]
    outputs.append(torch.tensor([[300], [301], [302]]))
    reordered = A.take_rows(outputs, merged.order)
    assert torch.equal(reordered, torch.tensor([[102], [100], [103], [300], [302], [301]]))


def test_merge_expert_shards_keeps_fp8_bytes():
    a = torch.tensor([[1.5], [-2.0]]).to(torch.float8_e4m3fn)
    merged = A.merge_expert_shards({"Aq": [a]}, [i32([1, 0])], experts_per_shard=2)
    assert merged.rows["Aq"].dtype == torch.float8_e4m3fn
    assert merged.rows["Aq"].float().flatten().tolist() == [-2.0, 1.5]


@pytest.mark.parametrize("bad", [[2], [-2]])
def test_merge_expert_shards_rejects_ids_outside_the_shard(bad):
    with pytest.raises(ValueError):
        A.expert_row_order([i32(bad)], experts_per_shard=2)


def test_merge_expert_shards_rejects_row_count_mismatch():
    with pytest.raises(ValueError):
        A.merge_expert_shards({"A": [torch.zeros(3, 1)]}, [i32([0, 1])], experts_per_shard=2)


# --- UE8M0 scales ---------------------------------------------------------------------------


def test_ue8m0_from_float_exponent_bytes():
    scales = torch.tensor([1.0, 2.0, 0.5, 2.0**-126, 2.0**127])
    out = A.ue8m0_from_float(scales)
    assert out.dtype == torch.int8
    assert torch.equal(out.view(torch.uint8), u8([127, 128, 126, 1, 254]))
    assert torch.equal(out, torch.tensor([127, -128, 126, 1, -2], dtype=torch.int8))
    bf16 = A.ue8m0_from_float(torch.tensor([0.25, 64.0], dtype=torch.bfloat16))
    assert torch.equal(bf16.view(torch.uint8), u8([125, 133]))


@pytest.mark.parametrize("value", [3.0, 0.75, 0.0, -2.0, float("inf"), float("nan"), 2.0**-128])
def test_ue8m0_from_float_rejects_non_powers_of_two(value):
    with pytest.raises(ValueError):
        A.ue8m0_from_float(torch.tensor([1.0, value]))


def test_ue8m0_words_unpack_least_significant_byte_first():
    words = i32([[0x7F80817E], [0x8001FF02 - (1 << 32)]])  # the second word is negative
    out = A.ue8m0_from_words(words)
    assert out.shape == (2, 4)
    assert torch.equal(out.view(torch.uint8), u8([[0x7E, 0x81, 0x80, 0x7F], [2, 255, 1, 128]]))
    two = A.ue8m0_from_words(i32([[0x04030201, 0x08070605]]))
    assert torch.equal(two.view(torch.uint8), u8([[1, 2, 3, 4, 5, 6, 7, 8]]))
    with pytest.raises(TypeError):
        A.ue8m0_from_words(torch.tensor([[1]], dtype=torch.int64))


def test_expand_scale_groups_passes_group32_bytes_through():
    out = A.expand_scale_groups(u8([[127, 130]]), k=64, group_size=32)
    assert out.dtype == torch.int8
    assert torch.equal(out.view(torch.uint8), u8([[127, 130]]))


def test_expand_scale_groups_group128_floats_to_four_bytes_each():
    out = A.expand_scale_groups(torch.tensor([[1.0, 4.0]]), k=256, group_size=128)
    assert torch.equal(out.view(torch.uint8), u8([[127, 127, 127, 127, 129, 129, 129, 129]]))


def test_expand_scale_groups_cuts_word_padding():
    # K = 384 in groups of 128: three scale bytes 0x7E, 0x7F, 0x80 and one padding byte 0xFF
    words = i32([[0xFF807F7E - (1 << 32)]])
    out = A.expand_scale_groups(words, k=384, group_size=128)
    assert torch.equal(out.view(torch.uint8), u8([[126] * 4 + [127] * 4 + [128] * 4]))


@pytest.mark.parametrize(
    ("scales", "k", "group"),
    [
        (torch.ones(1, 3), 256, 128),  # three scales where K/128 = 2
        (torch.ones(1, 1), 256, 128),  # one where two are needed
        (i32([[0x7F7F7F7F, 0x7F7F7F7F]]), 384, 128),  # two words where one holds 3 scales
        (torch.ones(1, 2), 96, 48),  # group not a multiple of 32
        (torch.ones(1, 4), 100, 32),  # K not a multiple of the group
        (u8([[255]]), 32, 32),  # NaN byte
        (torch.tensor([[3.0]]), 32, 32),  # not a power of two
    ],
)
def test_expand_scale_groups_rejects_inconsistent_inputs(scales, k, group):
    with pytest.raises(ValueError):
        A.expand_scale_groups(scales, k=k, group_size=group)


# --- sorted output serialization ------------------------------------------------------------


def test_sort_selected_ascending_with_weights_and_padding_last():
    ids = torch.tensor([[7, -1, 2, 5], [-1, -1, 3, 0]])
    weights = torch.tensor([[0.7, 0.0, 0.2, 0.5], [0.9, 0.8, 0.3, 0.1]])
    out = A.sort_selected(ids, weights)
    assert torch.equal(out.ids, torch.tensor([[2, 5, 7, -1], [0, 3, -1, -1]]))
    assert torch.equal(
        out.companions[0], torch.tensor([[0.2, 0.5, 0.7, 0.0], [0.1, 0.3, 0.9, 0.8]])
    )
    assert out.order.tolist() == [[2, 3, 0, 1], [3, 2, 0, 1]]
    assert out.ids.dtype == torch.int64


def test_sort_selected_keeps_int32_and_rejects_repeats():
    out = A.sort_selected(i32([[9, 4, -1, 1]]))
    assert torch.equal(out.ids, i32([[1, 4, 9, -1]]))
    for repeated in ([[3, 1, 3]], [[5, 5]]):
        with pytest.raises(ValueError):
            A.sort_selected(i32(repeated))
    assert A.sort_selected(i32([[3, 1, 3]]), require_distinct=False).ids.tolist() == [[1, 3, 3]]
    with pytest.raises(ValueError):
        A.sort_selected(i32([[2, -3]]))


def test_blocks_from_token_ids():
    tokens = i32([[8, 9, 10, 11, -1, -1, -1, -1, 0, 1, 2, 3, 40, 41, 42, 43]])
    assert torch.equal(A.blocks_from_token_ids(tokens, topk=3), i32([[2, -1, 0]]))
    with pytest.raises(ValueError):
        A.blocks_from_token_ids(i32([[5, 6, 7, 8]]), topk=1)
    with pytest.raises(ValueError):
        A.blocks_from_token_ids(tokens, topk=5)


def test_image_ids_from_segments():
    segments = [(0, 2, False), (2, 5, True), (5, 6, False), (6, 8, True)]
    assert torch.equal(A.image_ids_from_segments(segments, 8), i32([-1, -1, 0, 0, 0, -1, 1, 1]))
    with pytest.raises(ValueError):
        A.image_ids_from_segments([(0, 2, False), (3, 4, True)], 4)
    with pytest.raises(ValueError):
        A.image_ids_from_segments([(0, 2, True)], 3)
