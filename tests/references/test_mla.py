"""Sparse MLA prefill and mixed FP8/FP4 MLA decode references vs naive loops."""

from __future__ import annotations

import math

import pytest
import torch

SPARSE = "sparse_mla_prefill_h64_d512_k128"
MIXED = "mixed_mla_decode_deepseek41_h64_d512_k8128_k4512"
H, D = 64, 512

# ----------------------------------------------------------------------------- sparse MLA


def naive_sparse_mla(Q, KV, indices, topk_length, attn_sink, sm_scale):
    """Per query and head: logits over valid positions t < topk_length, sink in the sum."""
    rows, heads, dim = Q.shape
    out = torch.zeros(rows, heads, dim, dtype=torch.float64)
    for i in range(rows):
        keys = []
        for t in range(int(topk_length[i])):
            j = int(indices[i, 0, t])
            if 0 <= j < KV.shape[0]:
                keys.append(KV[j, 0].double())
        if not keys:
            continue  # no valid key: zeros
        keys = torch.stack(keys)
        for h in range(heads):
            logits = [sm_scale * float(Q[i, h].double() @ k) for k in keys]
            top = max(logits + [float(attn_sink[h])])
            numerator = sum(math.exp(x - top) * k for x, k in zip(logits, keys, strict=True))
            denominator = sum(math.exp(x - top) for x in logits)
            denominator += math.exp(float(attn_sink[h]) - top)  # zero-value sink, unscaled
            out[i, h] = numerator / denominator
    return out


def test_sparse_mla_matches_naive(reference, const_axes):
    axes = const_axes(SPARSE)
    assert (axes["H"], axes["D"], axes["TOPK"]) == (H, D, 128)
    generator = torch.Generator().manual_seed(30)
    nkv, width = 10, 128
    Q = torch.randn(6, H, D, generator=generator).bfloat16()
    KV = torch.randn(nkv, 1, D, generator=generator).bfloat16()
    indices = torch.full((6, 1, width), -1, dtype=torch.int32)
    rows = [
        [3, -1, 7, 12, 0, 9],  # -1 and 12 (>= Nkv) skipped
        [1, 1, 4],  # a repeated row counts twice
        [5, 6, 2, 8],  # entries past topk_length are ignored
        [],  # topk_length 0: zeros
        [-1, 10, 11],  # nothing valid: zeros
        list(range(nkv)) * 12 + [0] * 8,  # all 128 positions used
    ]
    for i, row in enumerate(rows):
        indices[i, 0, : len(row)] = torch.tensor(row, dtype=torch.int32)
    topk_length = torch.tensor([6, 3, 2, 0, 3, 128], dtype=torch.int32)
    sink = torch.linspace(-4, 4, H, dtype=torch.float32)
    sink[0] = -30.0  # practically no sink
    sm_scale = D**-0.5
    out = reference(SPARSE)(Q, KV, indices, topk_length, sink, sm_scale)
    assert out.dtype == torch.bfloat16 and out.shape == (6, H, D)
    expected = naive_sparse_mla(Q, KV, indices, topk_length, sink, sm_scale)
    torch.testing.assert_close(out.double(), expected, atol=8e-3, rtol=8e-3)
    assert torch.equal(out[3], torch.zeros(H, D, dtype=torch.bfloat16))
    assert torch.equal(out[4], torch.zeros(H, D, dtype=torch.bfloat16))


def test_sparse_mla_no_valid_key_with_minus_infinite_sink_gives_zeros(reference):
    Q = torch.randn(2, H, D).bfloat16()
    KV = torch.randn(3, 1, D).bfloat16()
    indices = torch.full((2, 1, 128), -1, dtype=torch.int32)
    indices[1, 0, 0] = 1  # row 1 is valid, but topk_length 0 hides it
    sink = torch.full((H,), -float("inf"))
    out = reference(SPARSE)(Q, KV, indices, torch.tensor([5, 0], dtype=torch.int32), sink, 0.1)
    assert torch.equal(out, torch.zeros(2, H, D, dtype=torch.bfloat16))


def test_sparse_mla_sink_is_an_unscaled_zero_value_logit(reference):
    """One key with q . k = 0: weight exp(0) / (exp(0) + exp(sink)); sink ln 3 gives 1/4
    whatever sm_scale is, sink -inf gives 1 and sink 0 gives 1/2."""
    KV = torch.zeros(2, 1, D)
    KV[1, 0, :4] = torch.tensor([8.0, -4.0, 2.0, 1.0])
    Q = torch.zeros(1, 3, D)
    Q[0, :, 10] = 5.0  # orthogonal to the key: logit 0
    indices = torch.full((1, 1, 128), -1, dtype=torch.int32)
    indices[0, 0, 0] = 1
    sink = torch.tensor([math.log(3.0), -float("inf"), 0.0])
    out = reference(SPARSE)(
        Q.bfloat16(), KV.bfloat16(), indices, torch.tensor([1], dtype=torch.int32), sink, 7.0
    )
    key = KV[1, 0]
    expected = torch.stack([key / 4, key, key / 2])
    torch.testing.assert_close(out[0].float(), expected, atol=1e-6, rtol=1e-3)


# ----------------------------------------------------------------------------- mixed MLA

E2M1 = {0: 0.0, 1: 0.5, 2: 1.0, 3: 1.5, 4: 2.0, 5: 3.0, 6: 4.0, 7: 6.0}


def e4m3(byte: int) -> float:
    """OCP FP8 E4M3 (fn): sign, 4 exponent bits (bias 7), 3 mantissa bits, no inf."""
    sign = -1.0 if byte & 0x80 else 1.0
    exponent, mantissa = (byte >> 3) & 0xF, byte & 0x7
    assert not (exponent == 15 and mantissa == 7), "NaN"
    if exponent == 0:
        return sign * mantissa / 8 * 2.0**-6
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


def e2m1(code: int) -> float:
    return -E2M1[code & 7] if code & 8 else E2M1[code & 7]


def test_own_decoders_hand_values():
    assert [e4m3(b) for b in (0x38, 0x40, 0xC4, 0x7E, 0x01, 0x30, 0x48)] == [
        1.0, 2.0, -3.0, 448.0, 2.0**-9, 0.5, 4.0,
    ]  # fmt: skip
    assert [e2m1(c) for c in (0b0001, 0b1111, 0b1010, 0b0111, 0b1000)] == [0.5, -6, -1, 6, 0]


def fp8_token(data: list[int], scales: list[int]) -> torch.Tensor:
    """512 e4m3 bytes, 16 UE8M0 bytes (2^(b-127)), one per 32 dims."""
    return torch.tensor(
        [e4m3(data[d]) * 2.0 ** (scales[d // 32] - 127) for d in range(D)], dtype=torch.float64
    )


def fp4_token(data: list[int], scales: list[int]) -> torch.Tensor:
    """256 bytes, dim 2i in the low nibble of byte i, 32 E4M3 scales, one per 16 dims."""
    values = []
    for d in range(D):
        code = data[d // 2] & 0xF if d % 2 == 0 else data[d // 2] >> 4
        values.append(e2m1(code) * e4m3(scales[d // 16]))
    return torch.tensor(values, dtype=torch.float64)


def build_pages(tokens: list[tuple[list[int], list[int]]], page: int, data_bytes: int):
    """Pages [N, P, 1, W] int8: each page holds its P data rows, then its P scale rows."""
    assert len(tokens) % page == 0
    pages = []
    for start in range(0, len(tokens), page):
        chunk = tokens[start : start + page]
        flat = [b for data, _ in chunk for b in data] + [b for _, sc in chunk for b in sc]
        pages.append(flat)
    width = data_bytes + len(tokens[0][1])
    raw = torch.tensor(pages, dtype=torch.uint8).reshape(len(pages), page, 1, width)
    return raw.view(torch.int8)


def random_fp8_token(generator):
    """e4m3 bytes with exponent field 0..8 (subnormals and |x| < 4), any sign."""
    exponent = torch.randint(0, 9, (D,), generator=generator)
    mantissa = torch.randint(0, 8, (D,), generator=generator)
    sign = torch.randint(0, 2, (D,), generator=generator)
    data = (sign * 128 + exponent * 8 + mantissa).tolist()
    scales = torch.randint(123, 129, (16,), generator=generator).tolist()
    return data, scales


def random_fp4_token(generator):
    data = torch.randint(0, 256, (D // 2,), generator=generator).tolist()
    scales = torch.randint(0x28, 0x40, (32,), generator=generator).tolist()  # 2^-2 .. 1.875
    return data, scales


def naive_mixed(Q, keys_per_row, attn_sink, sm_scale):
    """softmax(sm_scale q.k) @ V / (1 + exp(sink - lse)) per row and head; zeros if no key."""
    B, _, heads, dim = Q.shape
    out = torch.zeros(B, 1, heads, dim, dtype=torch.float64)
    for b, keys in enumerate(keys_per_row):
        if not keys:
            continue
        K = torch.stack(keys)
        for h in range(heads):
            logits = sm_scale * (K @ Q[b, 0, h].double())
            lse = torch.logsumexp(logits, dim=0)
            attended = torch.softmax(logits, dim=0) @ K
            out[b, 0, h] = attended / (1 + torch.exp(attn_sink[h].double() - lse))
    return out


def index_rows(rows, width):
    out = torch.full((len(rows), 1, width), -1, dtype=torch.int32)
    for b, row in enumerate(rows):
        out[b, 0, : len(row)] = torch.tensor(row, dtype=torch.int32)
    return out


@pytest.mark.parametrize("p8", [2, 4])
def test_mixed_mla_matches_naive_dequantization(reference, const_axes, p8):
    axes = const_axes(MIXED)
    assert (axes["H"], axes["D"], axes["W8"], axes["W4"]) == (H, D, 528, 288)
    assert (axes["TOPK8"], axes["TOPK4"]) == (128, 512)
    generator = torch.Generator().manual_seed(40 + p8)
    p4 = 2
    fp8 = [random_fp8_token(generator) for _ in range(2 * 4)]  # 8 tokens
    fp4 = [random_fp4_token(generator) for _ in range(3 * p4)]  # 6 tokens
    KV8 = build_pages(fp8, p8, D)
    KV4 = build_pages(fp4, p4, D // 2)
    assert KV8.shape == (8 // p8, p8, 1, 528) and KV4.shape == (3, p4, 1, 288)
    keys8 = [fp8_token(*t) for t in fp8]  # token index = page * P8 + offset
    keys4 = [fp4_token(*t) for t in fp4]
    rows8 = [[5, 0, 7], [], [], [2], [6, 6]]
    rows4 = [[3, 0, 4], [1, 2, 5], [], [], [0]]
    Q = (torch.randn(len(rows8), 1, H, D, generator=generator) * 0.5).bfloat16()
    sink = torch.linspace(-3, 3, H)
    sm_scale = D**-0.5
    out = reference(MIXED)(
        Q, KV8, KV4, index_rows(rows8, 128), index_rows(rows4, 512), sink, sm_scale
    )
    assert out.dtype == torch.bfloat16 and out.shape == Q.shape
    keys = [
        [keys8[t] for t in r8] + [keys4[t] for t in r4] for r8, r4 in zip(rows8, rows4, strict=True)
    ]
    expected = naive_mixed(Q, keys, sink, sm_scale)
    torch.testing.assert_close(out.double(), expected, atol=8e-3, rtol=8e-3)
    assert torch.equal(out[2], torch.zeros(1, H, D, dtype=torch.bfloat16))


def test_mixed_mla_single_token_returns_its_hand_built_key(reference):
    """Q = 0: one token gets weight 1 and lse 0, so the output is key / (1 + exp(sink)).

    FP8 token (page 1, offset 2 of P8 = 4): bytes 0x38 (1) at dim 0, 0xC4 (-3) at dim 1,
    0x40 (2) at dim 32, 0x01 (2^-9) at dim 511; scale bytes 128 (x2) for dims 0..31,
    126 (x1/2) for 32..63, 130 (x8) for 480..511.
    FP4 token (page 0, offset 1 of P4 = 2): byte 0 = 0xF1 (dim 0: 0.5, dim 1: -6),
    byte 8 = 0x2A (dim 16: -1, dim 17: 1), byte 255 = 0x70 (dim 510: 0, dim 511: 6);
    E4M3 scales 0x38 (1) for dims 0..15, 0x30 (1/2) for 16..31, 0x48 (4) for 496..511.
    """
    zero8 = ([0] * D, [127] * 16)
    zero4 = ([0] * (D // 2), [0x38] * 32)
    data8, scales8 = [0] * D, [127] * 16
    data8[0], data8[1], data8[32], data8[511] = 0x38, 0xC4, 0x40, 0x01
    scales8[0], scales8[1], scales8[15] = 128, 126, 130
    data4, scales4 = [0] * (D // 2), [0x38] * 32
    data4[0], data4[8], data4[255] = 0xF1, 0x2A, 0x70
    scales4[0], scales4[1], scales4[31] = 0x38, 0x30, 0x48
    KV8 = build_pages([zero8] * 6 + [(data8, scales8)] + [zero8], 4, D)
    KV4 = build_pages([zero4, (data4, scales4)], 2, D // 2)
    key8 = torch.zeros(D)
    key8[0], key8[1], key8[32], key8[511] = 2.0, -6.0, 1.0, 2.0**-6
    key4 = torch.zeros(D)
    key4[0], key4[1], key4[16], key4[17], key4[511] = 0.5, -6.0, -0.5, 0.5, 24.0
    Q = torch.zeros(3, 1, H, D, dtype=torch.bfloat16)
    indices8 = index_rows([[4 + 2], [], [-1, -1]], 128)
    indices4 = index_rows([[], [0 * 2 + 1], [-1]], 512)
    sink = torch.full((H,), -float("inf"))
    sink[1], sink[2] = 0.0, math.log(3.0)
    out = reference(MIXED)(Q, KV8, KV4, indices8, indices4, sink, D**-0.5).float()
    factor = torch.ones(H, 1)
    factor[1], factor[2] = 1 / 2, 1 / 4
    torch.testing.assert_close(out[0, 0], factor * key8, atol=1e-6, rtol=1e-3)
    torch.testing.assert_close(out[1, 0], factor * key4, atol=1e-6, rtol=1e-3)
    assert torch.equal(out[2], torch.zeros(1, H, D))
