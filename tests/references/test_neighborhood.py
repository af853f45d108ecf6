"""3-D neighborhood attention reference vs a brute-force per-query loop."""

from __future__ import annotations

import itertools

import torch

NAME = "neighborhood_attention_3d_h8_d64_kt3_ky5_kx5"
KERNEL = (3, 5, 5)  # (T, Y, X), from the definition's name and description
# The reference tiles queries by (2, 4, 8); none of these sizes is a multiple of its tile.
GRID = (5, 6, 9)


def window(i: int, length: int, size: int) -> range:
    """NATTEN's window of position i: start clamp(i - size//2, 0, length - size), size keys."""
    start = min(max(i - size // 2, 0), length - size)
    return range(start, start + size)


def naive_neighborhood(Q, K, V):
    """Every query, one at a time, over exactly kt*ky*kx keys; softmax with scale 1."""
    B, T, Y, X, H, D = Q.shape
    q, k, v = Q.double(), K.double(), V.double()
    out = torch.zeros(B, T, Y, X, H, D, dtype=torch.float64)
    for t, y, x in itertools.product(range(T), range(Y), range(X)):
        wt, wy, wx = window(t, T, KERNEL[0]), window(y, Y, KERNEL[1]), window(x, X, KERNEL[2])
        # The box of keys [B, kt, ky, kx, H, D] flattened to [B, kt*ky*kx, H, D].
        kk = k[:, wt.start : wt.stop, wy.start : wy.stop, wx.start : wx.stop].reshape(B, -1, H, D)
        vv = v[:, wt.start : wt.stop, wy.start : wy.stop, wx.start : wx.stop].reshape(B, -1, H, D)
        assert kk.shape[1] == KERNEL[0] * KERNEL[1] * KERNEL[2]
        logits = torch.einsum("bhd,bnhd->bhn", q[:, t, y, x], kk)
        weights = torch.exp(logits - logits.max(dim=-1, keepdim=True).values)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out[:, t, y, x] = torch.einsum("bhn,bnhd->bhd", weights, vv)
    return out


def test_window_helper_matches_hand_values():
    # Length 9, kernel 5: interior centred, borders shifted inward.
    assert [window(i, 9, 5).start for i in range(9)] == [0, 0, 0, 1, 2, 3, 4, 4, 4]
    assert [window(i, 5, 3).start for i in range(5)] == [0, 0, 1, 2, 2]


def test_matches_brute_force(reference, const_axes):
    axes = const_axes(NAME)
    assert (axes["KT"], axes["KY"], axes["KX"]) == KERNEL
    H, D = axes["H"], axes["D"]
    torch.manual_seed(0)
    shape = (2, *GRID, H, D)
    Q = (torch.randn(shape) * 0.25).bfloat16()
    K = torch.randn(shape).bfloat16()
    V = torch.randn(shape).bfloat16()
    out = reference(NAME)(Q, K, V)
    assert out.dtype == torch.bfloat16 and out.shape == shape
    expected = naive_neighborhood(Q, K, V)
    torch.testing.assert_close(out.double(), expected, atol=8e-3, rtol=8e-3)


def test_each_query_sees_exactly_its_shifted_window(reference, const_axes):
    """Q = 0 gives uniform weights over the window; V marks each key's (t, y, x).

    Channel c < T is 1 where t == c, channel T + c where y == c, T + Y + c where x == c,
    so a query's output is 1/k on exactly the window positions of each axis, 0 elsewhere.
    """
    axes = const_axes(NAME)
    H, D = axes["H"], axes["D"]
    T, Y, X = GRID
    assert T + Y + X <= D
    Q = torch.zeros(1, T, Y, X, H, D, dtype=torch.bfloat16)
    K = torch.randn(1, T, Y, X, H, D).bfloat16()  # irrelevant: all logits are 0
    V = torch.zeros(1, T, Y, X, H, D)
    for t, y, x in itertools.product(range(T), range(Y), range(X)):
        V[0, t, y, x, :, t] = 1.0
        V[0, t, y, x, :, T + y] = 1.0
        V[0, t, y, x, :, T + Y + x] = 1.0
    out = reference(NAME)(Q, K, V.bfloat16()).float()

    def seen(t, y, x):
        row = out[0, t, y, x, 0]
        assert torch.equal(out[0, t, y, x], row.expand(H, D))  # every head the same
        return (
            [c for c in range(T) if row[c] > 0.05],
            [c for c in range(Y) if row[T + c] > 0.05],
            [c for c in range(X) if row[T + Y + c] > 0.05],
        )

    # A corner query, written out by hand: the window shifts inward on every axis.
    assert seen(0, 5, 8) == ([0, 1, 2], [1, 2, 3, 4, 5], [4, 5, 6, 7, 8])
    assert seen(4, 0, 0) == ([2, 3, 4], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4])
    assert seen(2, 3, 4) == ([1, 2, 3], [1, 2, 3, 4, 5], [2, 3, 4, 5, 6])
    # Every query: exactly its window, uniformly weighted.
    for t, y, x in itertools.product(range(T), range(Y), range(X)):
        windows = (window(t, T, 3), window(y, Y, 5), window(x, X, 5))
        assert seen(t, y, x) == tuple(list(w) for w in windows), (t, y, x)
        row = out[0, t, y, x, 0]
        for offset, length, w in ((0, T, windows[0]), (T, Y, windows[1]), (T + Y, X, windows[2])):
            expected = torch.zeros(length)
            expected[list(w)] = 1.0 / len(w)
            torch.testing.assert_close(row[offset : offset + length], expected, atol=4e-3, rtol=0)


def test_the_gpu_block_shape_gives_the_cpu_block_shape_answer(dataset):
    """On CUDA the reference takes larger blocks of queries (fewer launches); every
    query's softmax is still over its own window, so both block shapes agree, here on
    the 11x11x11 window, on sizes that are multiples of neither block."""
    name = "neighborhood_attention_3d_h4_d64_kt11_ky11_kx11"
    namespace: dict = {}
    exec(dataset.definitions[name].reference, namespace)
    tiles = namespace["TILES"]
    assert tiles["cpu"] != tiles["cuda"]
    torch.manual_seed(1)
    shape = (1, 13, 18, 21, 4, 64)
    Q, K, V = (torch.randn(shape) * 0.25).bfloat16(), torch.randn(shape), torch.randn(shape)
    K, V = K.bfloat16(), V.bfloat16()
    cpu = namespace["run_tiled"](Q, K, V, tiles["cpu"])
    gpu = namespace["run_tiled"](Q, K, V, tiles["cuda"])
    assert namespace["run"](Q, K, V).equal(cpu)  # the CPU takes the CPU blocks
    # The same FP32 sums over more (masked, exactly zero) terms: at most a rounding apart.
    assert (cpu.float() - gpu.float()).abs().max() <= 2**-7 * cpu.float().abs().max()
    mismatched = (cpu != gpu).float().mean().item()
    assert mismatched < 0.01, mismatched
