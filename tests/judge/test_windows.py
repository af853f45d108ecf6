"""The referee's window kernels (``judge/windows.py``): every set gets exactly its window
(each element from one of two slices of the pool, as the bits say), and a change of any
byte of any set is seen. On the CPU in Triton's interpreter (a process
of its own: ``TRITON_INTERPRET`` is read when Triton is imported), compiled on CUDA."""

import os
import subprocess
import sys

import pytest
import torch

DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3fn")


def check(device: str) -> list[str]:
    """Gathered windows equal torch's selection of their two slices by their bits; each
    planted change is found, and nothing is found where nothing changed. Returns what was
    checked."""
    from inference_kernels.judge import windows

    generator = torch.Generator().manual_seed(7)
    done = []
    for name in DTYPES:
        dtype = getattr(torch, name)
        for count in (5, windows.BLOCK + 3):  # within one block, and over two
            pool = torch.randn(3 * count, generator=generator).to(dtype)
            pool[1] = float("nan")  # the same bytes in the pool and the set: not a change
            bits = torch.randint(0, 2, (3 * count,), generator=generator, dtype=torch.uint8)
            pool, bits = pool.to(device), bits.to(device)
            # a window may be given twice; its two slices may be one
            chosen = [(0, 1, 2), (1, 0, 2 * count), (2 * count, count + 1, 0), (3, 3, 1), (0, 1, 2)]
            rows = torch.full((len(chosen), count), 3.0, dtype=torch.float32).to(dtype)
            rows = rows.to(device)
            windows.gather(pool, bits, chosen, rows)
            for row, (first, second, chooser) in zip(rows, chosen, strict=True):
                pick = bits[chooser : chooser + count].bool()
                expected = torch.where(
                    pick, pool[first : first + count], pool[second : second + count]
                )
                same = row.view(torch.uint8) == expected.view(torch.uint8)
                assert bool(same.all()), (name, count, first, second, chooser)
            assert not bool(windows.differ(pool, bits, chosen, rows)), (name, count)
            for row, column in ((0, 0), (2, count - 1), (len(chosen) - 1, count // 2)):
                planted = rows.clone()
                raw = planted.view(torch.uint8).view(len(chosen), -1)
                raw[row, column * pool.element_size()] ^= 1  # one bit of one byte
                assert bool(windows.differ(pool, bits, chosen, planted)), (name, count, row, column)
            zeros = torch.zeros(count, dtype=torch.float32).to(dtype).to(device)
            ones = torch.ones(count, dtype=torch.uint8, device=device)
            negative = torch.full((1, count), -0.0, dtype=torch.float32).to(dtype).to(device)
            # equal values, other bytes
            assert bool(windows.differ(zeros, ones, [(0, 0, 0)], negative)), name
            done.append(f"{name}:{count}")
    pool, bits = torch.zeros(8, device=device), torch.zeros(8, dtype=torch.uint8, device=device)
    for chosen in ([(5, 0, 0)], [(0, -1, 0)], [(0, 0, 5)]):  # past either end of the pool
        with pytest.raises(ValueError, match="outside its pool"):
            windows.gather(pool, bits, chosen, torch.empty(1, 4, device=device))
    with pytest.raises(ValueError, match="a byte per element"):  # bits not of the pool
        windows.gather(pool, bits[:4], [(0, 0, 0)], torch.empty(1, 4, device=device))
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
