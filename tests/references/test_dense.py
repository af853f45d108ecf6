"""Dense GEMM, dense attention and prefix-cached block-causal attention references."""

from __future__ import annotations

import math

import pytest
import torch

GEMMS = [
    "dense_gemm_bf16_nt_n12288_k4096",
    "dense_gemm_bf16_nt_n4096_k12288",
    "dense_gemm_bf16_nt_n4096_k4096",
]
DENSE = ["noncausal_dense_attention_h32_d128", "noncausal_dense_attention_h32_d64"]
PREFIX = "prefix_cached_block_causal_h32_d128"
PREFIX0 = "prefix_cached_block_causal_h32_d128_prefix0"

# ----------------------------------------------------------------------------- GEMM


@pytest.mark.parametrize("name", GEMMS)
def test_gemm_hand_values(reference, name):
    A = torch.tensor([[1.0, 2.0], [3.0, 4.0], [-1.0, 0.5]]).bfloat16()
    W = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -3.0]]).bfloat16()
    C = reference(name)(A, W)
    assert C.dtype == torch.bfloat16
    expected = [[1.0, 2.0, 3.0, -4.0], [3.0, 4.0, 7.0, -6.0], [-1.0, 0.5, -0.5, -3.5]]
    assert C.float().tolist() == expected
    # BF16 range at both ends: 2^20 and 2^-30 (an FP16 intermediate would lose both).
    A = torch.tensor([[2.0**10, 2.0**-15]]).bfloat16()
    W = torch.tensor([[2.0**10, 0.0], [0.0, 2.0**-15]]).bfloat16()
    assert reference(name)(A, W).float().tolist() == [[2.0**20, 2.0**-30]]


@pytest.mark.parametrize("name", GEMMS)
def test_gemm_matches_float64_product(reference, name):
    """N and K are not baked into the references, so tiny ones do. M = 4100 crosses the
    reference's 4096-row chunk. Integer operands make every sum exact before the one
    BF16 rounding, so the result must be bit-identical; random operands within 1 ulp."""
    generator = torch.Generator().manual_seed(70)
    M, N, K = 4100, 16, 48
    A = torch.randint(-6, 7, (M, K), generator=generator).bfloat16()
    W = torch.randint(-6, 7, (N, K), generator=generator).bfloat16()
    C = reference(name)(A, W)
    assert torch.equal(C, (A.double() @ W.double().T).bfloat16())
    assert C.float().abs().max() > 256  # some sums are rounded to BF16
    A = torch.randn(5, 64, generator=generator).bfloat16()
    W = torch.randn(24, 64, generator=generator).bfloat16()
    C = reference(name)(A, W)
    torch.testing.assert_close(C.double(), A.double() @ W.double().T, atol=1e-3, rtol=8e-3)


# ----------------------------------------------------------------------------- attention


def naive_attention(Q, K, V, scale, allowed=None):
    """Loops over batch, query and head; allowed(i, j) says whether query i sees key j."""
    B, Nq, H, D = Q.shape
    out = torch.zeros(B, Nq, H, D, dtype=torch.float64)
    for b in range(B):
        for i in range(Nq):
            visible = [j for j in range(K.shape[1]) if allowed is None or allowed(i, j)]
            for h in range(H):
                logits = [scale * float(Q[b, i, h].double() @ K[b, j, h].double()) for j in visible]
                top = max(logits)
                weights = [math.exp(x - top) for x in logits]
                total = sum(weights)
                for w, j in zip(weights, visible, strict=True):
                    out[b, i, h] += (w / total) * V[b, j, h].double()
    return out


def qkv(generator, B, Nq, Nk, H, D):
    Q = torch.randn(B, Nq, H, D, generator=generator).bfloat16()
    K = torch.randn(B, Nk, H, D, generator=generator).bfloat16()
    V = torch.randn(B, Nk, H, D, generator=generator).bfloat16()
    return Q, K, V


@pytest.mark.parametrize("name", DENSE)
@pytest.mark.parametrize("lengths", [(3, 3), (2, 5)])
def test_dense_attention_matches_naive(reference, const_axes, name, lengths):
    axes = const_axes(name)
    H, D = axes["H"], axes["D"]
    generator = torch.Generator().manual_seed(80 + D)
    Q, K, V = qkv(generator, 2, *lengths, H, D)
    out = reference(name)(Q, K, V)
    assert out.dtype == torch.bfloat16 and out.shape == Q.shape
    expected = naive_attention(Q, K, V, D**-0.5)
    torch.testing.assert_close(out.double(), expected, atol=8e-3, rtol=8e-3)


def test_prefix_cached_attention_sees_every_prefix_and_current_key(reference, const_axes):
    axes = const_axes(PREFIX)
    H, D = axes["H"], axes["D"]
    generator = torch.Generator().manual_seed(90)
    B, Np, Nq = 2, 3, 4
    Q, K_current, V_current = qkv(generator, B, Nq, Nq, H, D)
    _, K_prefix, V_prefix = qkv(generator, B, 1, Np, H, D)
    out = reference(PREFIX)(Q, K_prefix, V_prefix, K_current, V_current)
    keys = torch.cat((K_prefix, K_current), dim=1)
    values = torch.cat((V_prefix, V_current), dim=1)
    expected = naive_attention(Q, keys, values, D**-0.5)
    torch.testing.assert_close(out.double(), expected, atol=8e-3, rtol=8e-3)


IMAGE_IDS = [-1, -1, 0, 0, 0, -1, 1, 1]
# Visible keys of each query: causal, plus the whole block for same-image queries.
VISIBLE = [
    [0],
    [0, 1],
    [0, 1, 2, 3, 4],
    [0, 1, 2, 3, 4],
    [0, 1, 2, 3, 4],
    [0, 1, 2, 3, 4, 5],
    [0, 1, 2, 3, 4, 5, 6, 7],
    [0, 1, 2, 3, 4, 5, 6, 7],
]


def prefix0_allowed(i, j):
    same_image = IMAGE_IDS[i] >= 0 and IMAGE_IDS[i] == IMAGE_IDS[j]
    return j <= i or same_image


def test_prefix0_visibility_by_hand(reference, const_axes):
    """Q = 0 gives uniform weights over the visible keys; V's dim j marks key j."""
    axes = const_axes(PREFIX0)
    H, D = axes["H"], axes["D"]
    n = len(IMAGE_IDS)
    assert [[j for j in range(n) if prefix0_allowed(i, j)] for i in range(n)] == VISIBLE
    Q = torch.zeros(1, n, H, D, dtype=torch.bfloat16)
    K = torch.randn(1, n, H, D).bfloat16()
    V = torch.zeros(1, n, H, D)
    for j in range(n):
        V[0, j, :, j] = 1.0
    image_ids = torch.tensor(IMAGE_IDS, dtype=torch.int32)
    out = reference(PREFIX0)(Q, K, V.bfloat16(), image_ids).float()
    for i, visible in enumerate(VISIBLE):
        expected = torch.zeros(H, D)
        expected[:, visible] = 1.0 / len(visible)
        torch.testing.assert_close(out[0, i], expected, atol=2e-3, rtol=0)


def test_prefix0_matches_naive(reference, const_axes):
    axes = const_axes(PREFIX0)
    H, D = axes["H"], axes["D"]
    generator = torch.Generator().manual_seed(91)
    n = len(IMAGE_IDS)
    Q, K, V = qkv(generator, 2, n, n, H, D)
    out = reference(PREFIX0)(Q, K, V, torch.tensor(IMAGE_IDS, dtype=torch.int32))
    expected = naive_attention(Q, K, V, D**-0.5, prefix0_allowed)
    torch.testing.assert_close(out.double(), expected, atol=8e-3, rtol=8e-3)
    # Plain causal attention differs on the image rows (the visibility matters).
    causal = naive_attention(Q, K, V, D**-0.5, lambda i, j: j <= i)
    assert not torch.allclose(out.double()[:, 2], causal[:, 2], atol=5e-2)
