"""Fresh windows written into the timing sets, and compared with them, in one kernel each
(CUDA).

Before every sample the referee writes each floating input of every set the sample uses
from its secret pool (``fresh.py``): element ``i`` of set ``j`` is ``pool[first + i]`` where
``bits[chooser + i]`` is 1, else ``pool[second + i]``, with ``(first, second, chooser)``
the set's secret window; after the sample it compares every such set with what was
written, byte for byte (``sets.py``). With torch's own operations that took either a copy
per window (launches: the bias GEMMs' 1.2 MB weight in 4,000 sets is 4,000 copies a
sample, and as many again to compare) or an ``index_select`` over an overlapping view of
the pool (about 100 GB/s on the H200). On the H200 audit at c839524 the two steps were 118
of 1,276 s: 0.84 s a case for ``dense_gemm_bf16_nt_bias_n1536_k384``, 0.41 s for
``noncausal_dense_attention_h32_d64``.

Here each step is one Triton kernel over every set: ``gather`` writes window ``j`` into row
``j`` and ``differ`` raises a flag where row ``j`` differs from window ``j``. Both move the
elements as integers of their width (a selection, no arithmetic), so that the comparison
is of bytes (a NaN equals itself; -0.0 does not equal 0.0) and any floating dtype, FP8
included, is handled alike.

The kernels run in the referee only. Triton is imported when they are first used (a CPU
judge never imports it; the tests run them in Triton's interpreter, ``TRITON_INTERPRET=1``
set before the import). The referee's Triton cache (``~/.triton``, or
``TRITON_CACHE_DIR``) is hidden from every worker with the rest of the home directories
and the file system is read-only to them (``sandbox.py``): no solution can plant a kernel
the referee would load.
"""

from __future__ import annotations

import functools

import torch

BLOCK = 4096  # elements of one window a program moves or compares
_AS_INTEGERS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


Window = tuple[int, int, int]  # (first, second, chooser): offsets into the pool and its bits


@functools.cache
def _kernels():
    import triton
    import triton.language as tl

    # (``count`` not specialized: one compiled kernel per element width, not per size)
    @triton.jit(do_not_specialize=["count"])
    def gather(pool, bits, offsets, rows, count, BLOCK: tl.constexpr):
        block, row = tl.program_id(0), tl.program_id(1)
        columns = block.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = columns < count
        first = tl.load(offsets + row * 3)  # the window: see the module's docstring
        second = tl.load(offsets + row * 3 + 1)
        chooser = tl.load(offsets + row * 3 + 2)
        one = tl.load(pool + first + columns, mask=inside)
        two = tl.load(pool + second + columns, mask=inside)
        pick = tl.load(bits + chooser + columns, mask=inside)
        values = tl.where(pick != 0, one, two)
        tl.store(rows + row.to(tl.int64) * count + columns, values, mask=inside)

    @triton.jit(do_not_specialize=["count"])
    def differ(pool, bits, offsets, rows, count, flag, BLOCK: tl.constexpr):
        block, row = tl.program_id(0), tl.program_id(1)
        columns = block.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = columns < count
        first = tl.load(offsets + row * 3)  # (as gather's)
        second = tl.load(offsets + row * 3 + 1)
        chooser = tl.load(offsets + row * 3 + 2)
        one = tl.load(pool + first + columns, mask=inside, other=0)
        two = tl.load(pool + second + columns, mask=inside, other=0)
        pick = tl.load(bits + chooser + columns, mask=inside, other=0)
        expected = tl.where(pick != 0, one, two)
        actual = tl.load(rows + row.to(tl.int64) * count + columns, mask=inside, other=0)
        if tl.max((actual != expected).to(tl.int32), axis=0) > 0:
            tl.atomic_max(flag, 1)

    return gather, differ


def check(pool: torch.Tensor, bits: torch.Tensor, windows: list[Window], count: int) -> None:
    """Raise ValueError unless every window of ``count`` elements lies in the pool and its
    bits (one byte, 0 or 1, per element of the pool)."""
    if bits.dtype != torch.uint8 or bits.numel() != pool.numel():
        raise ValueError("windows: the bits must be a byte per element of the pool")
    if any(len(window) != 3 for window in windows):
        raise ValueError("windows: a window is three offsets (first, second, chooser)")
    every = [offset for window in windows for offset in window]
    if every and (min(every) < 0 or max(every) + count > pool.numel()):
        raise ValueError("windows: a window outside its pool")


def _launch(kernel, pool, bits, windows: list[Window], rows: torch.Tensor, *extra) -> None:
    """``kernel`` over every row of ``rows`` ([len(windows), count], contiguous), each
    against its window of ``pool``."""
    count = rows.shape[1]
    if not rows.is_contiguous() or rows.dtype != pool.dtype or len(windows) != rows.shape[0]:
        raise ValueError("windows: rows must be contiguous, one per window, of the pool's dtype")
    check(pool, bits, windows, count)
    if not windows or count == 0:
        return
    integers = _AS_INTEGERS[pool.element_size()]
    offsets = torch.tensor(windows, dtype=torch.int64, device=pool.device)
    grid = (-(-count // BLOCK), len(windows))
    kernel[grid](
        pool.view(integers), bits, offsets, rows.view(integers), count, *extra, BLOCK=BLOCK
    )


def gather(
    pool: torch.Tensor, bits: torch.Tensor, windows: list[Window], rows: torch.Tensor
) -> None:
    """Row ``j`` of ``rows`` becomes window ``windows[j]`` of ``pool``."""
    _launch(_kernels()[0], pool, bits, windows, rows)


def differ(
    pool: torch.Tensor, bits: torch.Tensor, windows: list[Window], rows: torch.Tensor
) -> torch.Tensor:
    """A device bool: does any row of ``rows`` differ, in any byte, from its window?"""
    flag = torch.zeros(1, dtype=torch.int32, device=rows.device)
    _launch(_kernels()[1], pool, bits, windows, rows, flag)
    return flag[0] != 0
