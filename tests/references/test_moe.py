"""FP8 x FP4 grouped GEMM and the MoE router references vs naive implementations."""

from __future__ import annotations

import math

import torch

GEMM = "grouped_gemm_fp8_fp4_e384_n5120_k2304_g32"
GEMM_OTHER = "grouped_gemm_fp8_fp4_e384_n4608_k5120_g32"
ROUTER = "moe_router_gemm_topk_deepseek41_d5120_e384_topk6"

# ----------------------------------------------------------------------------- grouped GEMM

# Written from the description: bit 3 is the sign, bits 0-2 index {0, .5, 1, 1.5, 2, 3, 4, 6}.
FP4 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def e4m3(byte: int) -> float:
    sign = -1.0 if byte & 0x80 else 1.0
    exponent, mantissa = (byte >> 3) & 0xF, byte & 0x7
    if exponent == 0:
        return sign * mantissa / 8 * 2.0**-6
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


def pack_fp4(codes: list[list[int]]) -> torch.Tensor:
    """[N][K] codes -> [N, K/2] int8: element 2i in the low nibble of byte i."""
    packed = [[row[2 * i] | (row[2 * i + 1] << 4) for i in range(len(row) // 2)] for row in codes]
    return torch.tensor(packed, dtype=torch.uint8).view(torch.int8)


def as_int8(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.uint8).view(torch.int8)


def naive_grouped_gemm(a_bytes, a_scales, w_codes, w_scales, expert_id):
    """Y[m, n] = sum_k A[m, k] W[e, n, k], every factor decoded by hand, in float64."""
    M, K = len(a_bytes), len(a_bytes[0])
    Y = torch.zeros(M, len(w_codes[0]), dtype=torch.float64)
    for m in range(M):
        e = expert_id[m]
        a = [e4m3(a_bytes[m][k]) * 2.0 ** (a_scales[m][k // 32] - 127) for k in range(K)]
        for n in range(len(w_codes[e])):
            w = [FP4[w_codes[e][n][k]] * 2.0 ** (w_scales[e][n][k // 32] - 127) for k in range(K)]
            Y[m, n] = sum(x * y for x, y in zip(a, w, strict=True))
    return Y


def run_gemm(reference, name, a_bytes, a_scales, w_codes, w_scales, expert_id):
    Aq = torch.tensor(a_bytes, dtype=torch.uint8).view(torch.float8_e4m3fn)
    W = torch.stack([pack_fp4(codes) for codes in w_codes])
    return reference(name)(
        Aq,
        W,
        as_int8(a_scales),
        as_int8(w_scales),
        torch.tensor(expert_id, dtype=torch.int32),
    )


def test_grouped_gemm_hand_built_values(reference):
    """E = 2, N = 2, K = 64. Expert 0, row 0: k = 0 is code 0b0001 (0.5, low nibble),
    k = 1 is code 0b1111 (-6, high nibble), k = 40 is code 0b0110 (4); weight scales
    2 (byte 128) for k < 32 and 1/4 (byte 125) for k >= 32. Expert 1 is all 1.0 (0b0010).
    A row 0 = 1 at k = 0; row 1 = 1 at k = 1; row 2 = 1 (0x38) at k = 0, 1, 40 with scale
    bytes 127 (1) and 129 (4); row 3 uses expert 1: 0x40 (2) at every k, scale 1."""
    K = 64
    w0 = [[0] * K for _ in range(2)]
    w0[0][0], w0[0][1], w0[0][40] = 0b0001, 0b1111, 0b0110
    w0[1][0] = 0b1001  # -0.5 on output column 1
    w1 = [[0b0010] * K for _ in range(2)]
    w_scales = [[[128, 125]] * 2, [[127, 127]] * 2]
    a = [[0] * K for _ in range(4)]
    a[0][0] = 0x38
    a[1][1] = 0x38
    a[2][0] = a[2][1] = a[2][40] = 0x38
    a[3] = [0x40] * K
    a_scales = [[127, 127], [127, 127], [127, 129], [127, 127]]
    Y = run_gemm(reference, GEMM, a, a_scales, [w0, w1], w_scales, [0, 0, 0, 1])
    assert Y.dtype == torch.bfloat16
    expected = torch.tensor(
        [
            [0.5 * 2, -0.5 * 2],  # 1 x 0.5 x 2
            [-6.0 * 2, 0.0],  # 1 x -6 x 2
            [0.5 * 2 - 6.0 * 2 + 4 * 4 * 0.25, -0.5 * 2],  # k = 40: A 1 x 4, W 4 x 1/4
            [2.0 * 64, 2.0 * 64],  # expert 1: 64 terms of 2 x 1
        ]
    )
    assert torch.equal(Y.float(), expected)


def test_grouped_gemm_rows_use_their_own_expert(reference):
    """Random codes and scales, E = 3, N = 4, K = 64, vs the naive decoded matmul."""
    generator = torch.Generator().manual_seed(50)
    E, N, K, M = 3, 4, 64, 6

    def ints(low, high, *shape):
        return torch.randint(low, high, shape, generator=generator).tolist()

    # e4m3 bytes with exponent field 4..9 (|a| in [1/8, 7.5]) and both signs.
    a = [
        [s * 128 + e * 8 + m for s, e, m in zip(*row, strict=True)]
        for row in zip(ints(0, 2, M, K), ints(4, 10, M, K), ints(0, 8, M, K), strict=True)
    ]
    a_scales = ints(124, 131, M, K // 32)
    w_codes = ints(0, 16, E, N, K)
    w_scales = ints(122, 130, E, N, K // 32)
    expert_id = [0, 0, 1, 2, 2, 2]
    Y = run_gemm(reference, GEMM, a, a_scales, w_codes, w_scales, expert_id)
    expected = naive_grouped_gemm(a, a_scales, w_codes, w_scales, expert_id)
    torch.testing.assert_close(Y.double(), expected, atol=1e-6, rtol=4e-3)
    # The same rows with expert_id shifted must give other values (the test is sharp).
    shifted = naive_grouped_gemm(a, a_scales, w_codes, w_scales, [1, 1, 2, 0, 0, 0])
    assert not torch.allclose(Y.double(), shifted, rtol=1e-2)
    # The other grouped GEMM definition has the same contract.
    other = run_gemm(reference, GEMM_OTHER, a, a_scales, w_codes, w_scales, expert_id)
    assert torch.equal(other, Y)


# ----------------------------------------------------------------------------- router


def naive_router(X, W, bias_text, bias_image, is_image, routed_scale):
    ids_out, weights_out = [], []
    logits = X.double() @ W.double().T
    for m in range(X.shape[0]):
        scores = [math.sqrt(math.log1p(math.exp(x))) for x in logits[m].tolist()]
        bias = (bias_image if bool(is_image[m]) else bias_text).tolist()
        ranked = sorted(range(len(scores)), key=lambda e: -(scores[e] + bias[e]))
        chosen = sorted(ranked[:6])
        total = sum(scores[e] for e in chosen)
        ids_out.append(chosen)
        weights_out.append([scores[e] / (total + 1e-20) * routed_scale for e in chosen])
    return ids_out, torch.tensor(weights_out, dtype=torch.float64)


def test_router_bias_selects_but_does_not_weigh(reference, const_axes):
    """X = e_0, so logits are W[:, 0]. Unbiased top 6 are experts {2, 3, 5, 7, 8, 9};
    a text bias of +10 on experts 0 and 1 swaps them in for the two weakest (3 and 5),
    while their weights still use the unbiased sqrt(softplus) scores. The image token
    (bias_image favours expert 4) selects differently from the same logits."""
    assert const_axes(ROUTER)["TOPK"] == 6
    E, D = 10, 16
    logit = [-2.0, -1.0, 4.0, 1.0, 0.0, 0.5, -3.0, 3.0, 2.0, 6.0]
    W = torch.zeros(E, D)
    W[:, 0] = torch.tensor(logit)
    X = torch.zeros(2, D)
    X[:, 0] = 1.0
    bias_text = torch.zeros(E)
    bias_text[0] = bias_text[1] = 10.0
    bias_image = torch.zeros(E)
    bias_image[4] = 5.0
    is_image = torch.tensor([False, True])
    ids, weights = reference(ROUTER)(
        X.bfloat16(), W.bfloat16(), bias_text, bias_image, is_image, 1.5
    )
    assert ids.dtype == torch.int64 and weights.dtype == torch.float32
    assert ids.tolist() == [[0, 1, 2, 7, 8, 9], [2, 3, 4, 7, 8, 9]]

    def score(x):
        return math.sqrt(math.log1p(math.exp(x)))

    for row, chosen in enumerate(ids.tolist()):
        s = [score(logit[e]) for e in chosen]
        expected = torch.tensor([v / sum(s) * 1.5 for v in s], dtype=torch.float64)
        torch.testing.assert_close(weights[row].double(), expected, atol=0, rtol=1e-6)
        assert math.isclose(float(weights[row].sum()), 1.5, rel_tol=1e-6)


def test_router_random_tokens_match_naive(reference):
    generator = torch.Generator().manual_seed(60)
    M, D, E = 5, 32, 12
    X = torch.randn(M, D, generator=generator).bfloat16()
    W = torch.randn(E, D, generator=generator).bfloat16()
    bias_text = torch.randn(E, generator=generator)
    bias_image = torch.randn(E, generator=generator)
    is_image = torch.tensor([False, True, True, False, True])
    ids, weights = reference(ROUTER)(X, W, bias_text, bias_image, is_image, 2.5)
    expected_ids, expected_weights = naive_router(X, W, bias_text, bias_image, is_image, 2.5)
    assert ids.tolist() == expected_ids
    torch.testing.assert_close(weights.double(), expected_weights, atol=0, rtol=1e-5)
    # Swapping the biases changes at least one selection: the per-token bias matters.
    swapped, _ = naive_router(X, W, bias_text, bias_image, ~is_image, 2.5)
    assert swapped != expected_ids


def _router_cut(dataset):
    """Token 0: experts 5 and 6 tie exactly at the cut (any order may pick either); token 1:
    they are 1e-5 apart, within atol 2e-5; token 2: 0.5 apart, a clear cut."""
    from inference_kernels.materialize.references import run_reference

    definition = dataset.definitions[ROUTER]
    tolerance = dataset.tasks[ROUTER].tolerance
    E, D = 10, 16
    X = torch.zeros(3, D)
    X[:, 0] = 1.0
    W = torch.zeros(E, D)
    W[:, 0] = torch.tensor([6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 1.0, -1.0, -2.0, -3.0])
    bias_text = torch.zeros(E)
    bias_image = torch.zeros(E)
    bias_image[5] = 0.5  # token 2 is an image token: expert 5 clearly wins the cut
    is_image = torch.tensor([False, False, True])
    inputs = [X.bfloat16(), W.bfloat16(), bias_text, bias_image, is_image, 1.5]
    inputs[2] = bias_text.clone()
    inputs[2][6] = -1e-5  # token 1: expert 6 is 1e-5 below expert 5 (scores ~1.13 there)
    ids, weights = run_reference(definition, inputs)
    return definition, tolerance, inputs, ids, weights


def test_router_ambiguous_rows_are_the_tokens_whose_top6_cut_is_within_tolerance(dataset):
    """Token 0: experts 5 and 6 tie exactly at the cut (any order may pick either); token 1:
    they are 1e-5 apart, within atol 2e-5; token 2: 0.5 apart, a clear cut. A kernel that
    routes token 0 or 1 the other way passes the task's check of both outputs; the same
    swap on token 2 fails it."""
    from inference_kernels.acceptance import compare
    from inference_kernels.materialize.references import ambiguous_rows

    definition, tolerance, inputs, ids, weights = _router_cut(dataset)
    assert tolerance.ambiguity.outputs == ["expert_ids", "expert_weights"]
    assert ids[0].tolist()[:5] == [0, 1, 2, 3, 4] and int(ids[0, 5]) in (5, 6)  # the tie
    assert ids[1:].tolist() == [[0, 1, 2, 3, 4, 5]] * 2
    rows = ambiguous_rows(definition, tolerance, inputs, [ids, weights])
    assert rows.tolist() == [True, True, False]

    for token, passes in ((0, True), (1, True), (2, False)):
        other_ids = ids.clone()
        other_ids[token, 5] = 11 - other_ids[token, 5]  # the other of experts 5 and 6
        verdict = compare(other_ids, ids, tolerance, rows)
        assert verdict.passed is passes, (token, verdict)
        assert verdict.ignored_rows == 2
        assert compare(other_ids, ids, tolerance).passed is False  # without the rows
    assert verdict.message == "1/6 elements differ (exact) (2 ambiguous rows left out)"
    # the weights of an ambiguous token are left out too, the others still compared
    other_weights = weights.clone()
    other_weights[0] *= 1.01
    assert compare(other_weights, weights, tolerance, rows).passed
    other_weights[2] *= 1.01
    verdict = compare(other_weights, weights, tolerance, rows)
    assert not verdict.passed and verdict.worst_index[0] == 2  # the token's own index


def test_router_marked_tokens_must_still_hold_a_routing_some_order_gives(dataset):
    """The task's accept function (valid_routing) on the tokens of ``_router_cut``: the
    reference's routing and, on the tied tokens 0 and 1, the other of experts 5 and 6 with
    its own weights are accepted; a clearly worse expert, a repeated one, ids out of order
    or out of range, and weights off by 1% or NaN are not. Before the set check a marked
    token went unchecked: any of these passed there."""
    from inference_kernels.materialize.references import rejected_rows

    definition, tolerance, inputs, ids, weights = _router_cut(dataset)
    assert tolerance.ambiguity.accept == "valid_routing"
    everything = torch.ones(3, dtype=torch.bool)

    def rejected(produced_ids, produced_weights):
        produced = [produced_ids, produced_weights]
        return rejected_rows(definition, tolerance, inputs, produced, everything).tolist()

    def routed(token, experts):  # the token's weights for these experts, as the reference
        X, W, scale = inputs[0].float(), inputs[1].float(), inputs[5]
        scores = torch.sqrt(torch.nn.functional.softplus(X[token] @ W.T))[experts]
        return scores / (scores.sum() + 1e-20) * scale

    assert rejected(ids, weights) == [False] * 3
    for token in (0, 1):
        other_ids, other_weights = ids.clone(), weights.clone()
        other_ids[token, 5] = 11 - other_ids[token, 5]
        other_weights[token] = routed(token, other_ids[token])
        assert rejected(other_ids, other_weights) == [False] * 3, token
    changes = {
        "a clearly worse expert": lambda i, w: (i.index_fill(0, torch.tensor([5]), 9), w),
        "repeated": lambda i, w: (i.index_fill(0, torch.tensor([5]), 4), w),
        "out of order": lambda i, w: (i.flip(0), w.flip(0)),
        "out of range": lambda i, w: (i.index_fill(0, torch.tensor([5]), 10), w),
        "negative": lambda i, w: (i.index_fill(0, torch.tensor([0]), -1), w),
        "weights 1% off": lambda i, w: (i, w * 1.01),
        "NaN weight": lambda i, w: (i, w.index_fill(0, torch.tensor([2]), float("nan"))),
    }
    for name, change in changes.items():
        other_ids, other_weights = ids.clone(), weights.clone()
        other_ids[0], other_weights[0] = change(ids[0].clone(), weights[0].clone())
        assert rejected(other_ids, other_weights) == [True, False, False], name


def test_router_set_check_scales_the_tolerance_as_the_ambiguity_does(dataset):
    """Found by a red-team trial of the set check: the 6th biased score 0, the 7th -2.0001e-5
    (within atol 2e-5 + rtol 1e-4 * |7th|): the token is marked, and the other side of its
    cut, with its own weights, was rejected (its tolerance scaled by the 6th, not the 7th)."""
    import torch.nn.functional as F

    from inference_kernels.materialize.references import (
        ambiguous_rows,
        rejected_rows,
        run_reference,
    )

    definition, tolerance = dataset.definitions[ROUTER], dataset.tasks[ROUTER].tolerance
    X = torch.zeros(1, 16)
    X[:, 0] = 1.0
    W = torch.zeros(10, 16)
    W[:, 0] = torch.tensor([6.0, 5.0, 4.0, 3.0, 2.0, -12.0, -12.0, -1.0, -2.0, -3.0])
    X, W = X.bfloat16(), W.bfloat16()
    scores = torch.sqrt(F.softplus(X.float() @ W.float().T))[0]
    bias = torch.full((10,), -10.0)
    bias[:5] = 0.0
    bias[5] = -scores[5]  # the 6th biased score: exactly 0
    bias[6] = -scores[6] - 2.00005e-5  # the 7th: about -2.0001e-5 in FP32
    seventh = float(scores[6] + bias[6])
    assert 2e-5 < -seventh <= 2e-5 + 1e-4 * -seventh
    inputs = [X, W, bias, bias.clone(), torch.tensor([False]), 1.5]
    ids, weights = run_reference(definition, inputs)
    marked = ambiguous_rows(definition, tolerance, inputs, [ids, weights])
    assert ids.tolist() == [[0, 1, 2, 3, 4, 5]] and marked.tolist() == [True]
    flipped = torch.tensor([[0, 1, 2, 3, 4, 6]])
    picked = scores[flipped[0]]
    flipped_weights = (picked / (picked.sum() + 1e-20) * 1.5)[None]
    produced = [flipped, flipped_weights]
    assert rejected_rows(definition, tolerance, inputs, produced, marked).tolist() == [False]
