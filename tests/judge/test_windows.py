"""The referee's window kernels (``judge/windows.py``): every set gets exactly its window,
and a change of any byte of any set is seen. On the CPU in Triton's interpreter (a process
of its own: ``TRITON_INTERPRET`` is read when Triton is imported), compiled on CUDA."""

import os
import subprocess
import sys

import pytest
import torch

DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3fn")


def check(device: str) -> list[str]:
    """Gathered windows equal torch's slices; each planted change is found, and nothing
    is found where nothing changed. Returns what was checked."""
    from inference_kernels.judge import windows

    generator = torch.Generator().manual_seed(7)
    done = []
    for name in DTYPES:
        dtype = getattr(torch, name)
        for count in (5, windows.BLOCK + 3):  # within one block, and over two
            pool = torch.randn(3 * count, generator=generator).to(dtype)
            pool[1] = float("nan")  # the same bytes in the pool and the set: not a change
            pool = pool.to(device)
            offsets = [0, 1, 2 * count, count + 1, 1]  # a window may be given twice
            rows = torch.full((len(offsets), count), 3.0, dtype=torch.float32).to(dtype)
            rows = rows.to(device)
            windows.gather(pool, offsets, rows)
            for row, offset in zip(rows, offsets, strict=True):
                same = row.view(torch.uint8) == pool[offset : offset + count].view(torch.uint8)
                assert bool(same.all()), (name, count, offset)
            assert not bool(windows.differ(pool, offsets, rows)), (name, count)
            for row, column in ((0, 0), (2, count - 1), (len(offsets) - 1, count // 2)):
                planted = rows.clone()
                raw = planted.view(torch.uint8).view(len(offsets), -1)
                raw[row, column * pool.element_size()] ^= 1  # one bit of one byte
                assert bool(windows.differ(pool, offsets, planted)), (name, count, row, column)
            zeros = torch.zeros(count, dtype=torch.float32).to(dtype).to(device)
            negative = torch.full((1, count), -0.0, dtype=torch.float32).to(dtype).to(device)
            assert bool(windows.differ(zeros, [0], negative)), name  # equal values, other bytes
            done.append(f"{name}:{count}")
    pool = torch.zeros(8, device=device)
    for offsets in ([5], [-1]):  # a window past either end of its pool
        with pytest.raises(ValueError, match="outside its pool"):
            windows.gather(pool, offsets, torch.empty(1, 4, device=device))
    return done


def test_windows_in_the_interpreter():
    code = "import sys; sys.path.insert(0, 'tests/judge'); import test_windows as t; "
    code += "print(t.check('cpu'))"
    environment = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count(":") == 2 * len(DTYPES), done.stdout


@pytest.mark.gpu
def test_windows_compiled_on_cuda():
    assert len(check("cuda")) == 2 * len(DTYPES)
