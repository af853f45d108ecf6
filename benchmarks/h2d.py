"""How fast do a workload's inputs and cached references reach the device?

The referee moves every workload's inputs (a memfd the prefetch helper filled, mapped
privately) and its cached reference (a file under the cache, read into memory and
authenticated) to the device: 0.06 s a case each in the H200 audit at c839524, 30 s of it in
the nine 11x11x11 neighborhood attentions. This times, for a few sizes, the ways of moving
such bytes: a file read into a new bytearray then ``.to(device)`` (the cache until the
fifteenth session), a private mapping of a memfd then ``.to(device)`` (the inputs until
then), the file read into a pinned buffer kept between cases, and what replaced both:
the mapping sent through pinned buffers in chunks on several threads
(``host_to_device.upload``), the cache's file also hashed there (``_uploaded``).
Prints JSON: seconds per way and size (best of REPEATS).

    PYTHONPATH=src python3 benchmarks/h2d.py [--sizes-mb 64 1024 4096]
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import time
from pathlib import Path

import torch

from inference_kernels.host_to_device import upload
from inference_kernels.judge.reference_cache import _uploaded

REPEATS = 3


def _best(function) -> float:
    times = []
    for _ in range(REPEATS):
        torch.cuda.synchronize()
        began = time.perf_counter()
        function()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - began)
    return round(min(times), 4)


def _ways(path: str, memfd: int, size: int, device: torch.device) -> dict:
    pinned = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    target = torch.empty(size, dtype=torch.uint8, device=device)

    def read_new():  # the reference cache before the fifteenth session
        data = bytearray(size)
        with open(path, "rb") as file:
            file.readinto(data)
        torch.frombuffer(data, dtype=torch.uint8).to(device)

    def read_pinned():
        with open(path, "rb") as file:
            file.readinto(pinned.numpy())
        target.copy_(pinned, non_blocking=True)

    def mapped_plain():  # the prefetched inputs before the fifteenth session
        view = mmap.mmap(memfd, size, flags=mmap.MAP_PRIVATE)
        torch.frombuffer(view, dtype=torch.uint8).to(device)
        view.close()

    def mapped_upload():  # the prefetched inputs now (host_to_device.upload)
        view = mmap.mmap(memfd, size, flags=mmap.MAP_PRIVATE)
        upload([(torch.frombuffer(view, dtype=torch.uint8), target)])
        view.close()

    def cache_upload():  # the reference cache now: mapped, hashed in the pinned chunks
        _uploaded(Path(path), device)

    return {
        way.__name__: way
        for way in (read_new, read_pinned, mapped_plain, mapped_upload, cache_upload)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[64, 1024, 4096])
    parser.add_argument("--folder", default="/dev/shm")
    options = parser.parse_args()
    device = torch.device("cuda", 0)
    torch.empty(1, device=device)
    results = {}
    for mb in options.sizes_mb:
        size = mb << 20
        path = os.path.join(options.folder, f"h2d-{mb}.bin")
        with open(path, "wb") as file:
            file.write(os.urandom(1 << 20) * mb)
        memfd = os.memfd_create("h2d")
        os.ftruncate(memfd, size)
        with open(path, "rb") as file:
            os.sendfile(memfd, file.fileno(), 0, size)
        ways = _ways(path, memfd, size, device)
        results[f"{mb} MB"] = {name: _best(way) for name, way in ways.items()}
        print(json.dumps({f"{mb} MB": results[f"{mb} MB"]}), flush=True)
        os.close(memfd)
        os.unlink(path)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
