"""How close the chunked GDN prefill's two ways of inverting a chunk's I + A come to a
float64 inverse, in FP32 on the CPU (the algebra of _chunk_prepare, not the kernel; the
GPU's TF32x3 products are about FP32's accuracy):

* "blocks" (shipped): the four [16, 16] diagonal blocks by forward substitution, then the
  [64, 64] tile merged from them, T = (I - N)(I + N^2) D with N = D A_o;
* "nested" (SOLVE "nested"): the sixteen [4, 4] blocks by substitution, each [16, 16]
  block merged from its four the same way, then the tile from its four.

A_ij = beta_i exp(G_i - G_j) (k_i . k_j) for j < i, over four kinds of keys: unit random,
unit and correlated (slow decay), random of norm about 3, correlated of norm about 1.5 with
slow decay (ill-conditioned). Prints each kind's largest |T| and |A| and each way's
largest absolute error.

    python benchmarks/gdn_inverse_accuracy.py
"""

from __future__ import annotations

import torch

C, K = 64, 128


def substituted(A: torch.Tensor, size: int) -> torch.Tensor:
    """blockdiag((I + A_bb)^-1) over the [size, size] diagonal blocks, row by row."""
    D = torch.zeros_like(A)
    eye = torch.eye(size, dtype=A.dtype)
    for b in range(0, C, size):
        block, inverse = A[b : b + size, b : b + size], eye.clone()
        for s in range(1, size):
            inverse[s] = eye[s] - block[s, :s] @ inverse[:s]
        D[b : b + size, b : b + size] = inverse
    return D


def merged(D: torch.Tensor, A: torch.Tensor, inner: int, outer: int) -> torch.Tensor:
    """(I + A)^-1 on each [outer, outer] diagonal block from D, its [inner, inner] blocks'."""
    r = torch.arange(C)
    below = (r // inner)[:, None] > (r // inner)[None, :]
    below &= (r // outer)[:, None] == (r // outer)[None, :]
    N = D @ torch.where(below, A, torch.zeros_like(A))
    X = D + (N @ N) @ D
    return X - N @ X


def chunk(kind: str, g: torch.Generator) -> torch.Tensor:
    """A chunk's A in float64, for keys of ``kind``."""
    base = torch.randn(K, generator=g)
    keys = {
        "unit random": lambda: torch.randn(C, K, generator=g),
        "unit correlated": lambda: base + 0.05 * torch.randn(C, K, generator=g),
        "norm 3 random": lambda: torch.randn(C, K, generator=g) * 0.3,
        "norm 1.5 correlated": lambda: (base + 0.05 * torch.randn(C, K, generator=g)) * 0.13,
    }[kind]()
    if kind.startswith("unit"):
        keys = keys / keys.norm(dim=1, keepdim=True)
    slow = "correlated" in kind
    G = torch.cumsum(-torch.rand(C, generator=g) * (0.001 if slow else 0.1), 0)
    beta = torch.sigmoid(torch.randn(C, generator=g) + 2)
    i = torch.arange(C)
    A = beta[:, None] * torch.exp(G[:, None] - G[None, :]) * (keys @ keys.T)
    return torch.where(i[:, None] > i[None, :], A, torch.zeros(C, C)).double()


def main() -> None:
    g = torch.Generator().manual_seed(0)
    print(f"{'keys':20} {'|T| max':>9} {'|A| max':>8} {'blocks':>9} {'nested':>9}")
    for kind in ("unit random", "unit correlated", "norm 3 random", "norm 1.5 correlated"):
        A64 = chunk(kind, g)
        truth = torch.linalg.inv(torch.eye(C, dtype=torch.float64) + A64)
        A = A64.float()
        blocks = merged(substituted(A, 16), A, 16, 64)
        nested = merged(merged(substituted(A, 4), A, 4, 16), A, 16, 64)
        errors = [(T.double() - truth).abs().max().item() for T in (blocks, nested)]
        print(
            f"{kind:20} {truth.abs().max().item():9.3g} {A.abs().max().item():8.3g}"
            f" {errors[0]:9.2g} {errors[1]:9.2g}"
        )


if __name__ == "__main__":
    main()
