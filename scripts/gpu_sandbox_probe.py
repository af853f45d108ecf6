"""What the worker sandbox does on a GPU machine, measured: prints one JSON document.

- bwrap start-up: ``/bin/true`` in the sandbox, and a Python that imports torch and
  initializes CUDA, with and without the sandbox (seconds, median of 5);
- CUDA IPC both ways across the sandbox boundary (``judge/cuda_ipc.py``): the referee's
  dedicated buffer mapped by the worker, the worker's caching-allocator segment mapped by
  the referee;
- what happens when the referee frees a buffer a sandboxed worker still maps and then
  allocates again: does the worker's later write land in the new memory?
- whether CUDA initializes under the worker's RLIMIT_DATA, and pinned host memory;
- the worker's GPU memory as NVML sees it.

Usage: python scripts/gpu_sandbox_probe.py [--out probe.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from inference_kernels.judge import cuda_ipc
from inference_kernels.judge.channel import Channel, pair
from inference_kernels.judge.sandbox import (
    Sandbox,
    apply_limits,
    bwrap_path,
    identity,
    limits,
    probe,
)
from inference_kernels.judge.shared import Inbox, Outbox
from inference_kernels.judge.syscall_filter import opened_program

SIZE = 64 << 20


def child(fd: int) -> None:
    from inference_kernels.judge.worker import drop_privileges

    drop_privileges(identity())
    channel = Channel.from_fd(fd)
    device = torch.device("cuda:0")
    torch.cuda.set_device(device)
    torch.empty(1, device=device)
    report: dict = {"uid": os.getuid(), "pid_in_namespace": os.getpid()}
    message, _ = channel.recv()
    imports = cuda_ipc.Imports(device)
    shared = imports.open(message["handle"])
    report["read_referee_buffer"] = int(shared[:SIZE].view(torch.int32)[:4].sum().item())
    shared[:64].fill_(7)
    mine = torch.arange(1000, dtype=torch.float32, device=device) * 2
    outbox = Outbox(device)
    refs = outbox.add([mine])
    torch.cuda.synchronize()
    pinned = torch.empty(1 << 28, dtype=torch.uint8, pin_memory=True)
    report["pinned_bytes"] = pinned.numel()
    channel.send({"refs": refs, "buffers": outbox.new, "report": report})
    channel.recv()  # the referee has freed its buffer and allocated again
    errors = []
    try:
        for _ in range(50):
            shared[:SIZE].view(torch.int32).fill_(99)
            torch.cuda.synchronize()
            time.sleep(0.01)
    except Exception as error:  # noqa: BLE001
        errors.append(f"{type(error).__name__}: {error}"[:300])
    channel.send({"writes_after_free_errors": errors})
    channel.recv()


def timed(command, runs: int = 5) -> float:
    """Median seconds of the command ``command(fd)`` makes of a seccomp descriptor (bwrap
    reads the program through it: one descriptor a run)."""
    seconds = []
    for _ in range(runs):
        with opened_program() as syscalls:
            began = time.perf_counter()
            subprocess.run(command(syscalls), check=True, capture_output=True, pass_fds=[syscalls])
            seconds.append(time.perf_counter() - began)
    return round(statistics.median(seconds), 4)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", type=int)
    parser.add_argument("--out", type=Path)
    options = parser.parse_args()
    if options.child is not None:
        return child(options.child)
    result: dict = {"bwrap": bwrap_path(), "probe": probe(bwrap_path())}
    sandbox = Sandbox(bwrap_path())
    here = Path(__file__).resolve()
    python = [sys.executable, "-s", "-B"]
    cuda_init = [*python, "-c", "import torch; torch.empty(1, device='cuda')"]
    result["startup_seconds"] = {
        "bwrap_true": timed(lambda fd: sandbox.command(here.parent, True, ["/bin/true"], fd)),
        "python_torch_cuda_sandboxed": timed(
            lambda fd: sandbox.command(here.parent, True, cuda_init, fd)
        ),
        "python_torch_cuda_plain": timed(lambda fd: cuda_init),
    }
    device = torch.device("cuda:0")
    torch.cuda.set_device(device)
    torch.empty(1, device=device)
    buffer = cuda_ipc.Allocation.create(SIZE, device)
    buffer.tensor.view(torch.int32).copy_(torch.arange(SIZE // 4, dtype=torch.int32, device=device))
    expected_sum = int(torch.arange(4).sum())
    ours, theirs = pair()
    values = limits(sandbox.memory, identity())
    child_command = [*python, str(here), "--child", str(theirs.fileno())]
    with theirs, opened_program() as syscalls:
        process = subprocess.Popen(
            sandbox.command(here.parent, True, child_command, syscalls),
            pass_fds=[theirs.fileno(), syscalls],
            preexec_fn=lambda: apply_limits(values),
        )
    channel = Channel(ours)
    channel.send({"handle": buffer.handle})
    reply, fds = channel.recv(time.monotonic() + 300)
    result["child"] = reply["report"]
    result["child"]["read_referee_buffer_ok"] = (
        reply["report"]["read_referee_buffer"] == expected_sum
    )
    torch.cuda.synchronize()
    result["worker_wrote_referee_buffer"] = bool((buffer.tensor[:64] == 7).all())
    inbox = Inbox(device)
    inbox.announce(reply["buffers"], fds)
    (theirs_tensor,) = inbox.read(reply["refs"])
    result["referee_read_worker_segment"] = bool(
        torch.equal(theirs_tensor, torch.arange(1000, dtype=torch.float32, device=device) * 2)
    )
    inbox.close()
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        result["nvml_processes"] = [
            {"pid": p.pid, "used_bytes": p.usedGpuMemory}
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        ]
        result["nvml_child_pid_outside"] = process.pid
    except Exception as error:  # noqa: BLE001
        result["nvml_error"] = str(error)
    old = buffer.address
    buffer.free()
    again = [cuda_ipc.Allocation.create(SIZE, device) for _ in range(8)]
    for allocation in again:
        allocation.tensor.zero_()
    torch.cuda.synchronize()
    result["reallocated_at_freed_address"] = any(a.address == old for a in again)
    channel.send({"op": "freed"})
    reply, _ = channel.recv(time.monotonic() + 120)
    result["worker_writes_after_free"] = reply
    torch.cuda.synchronize()
    result["worker_write_after_free_reached_new_memory"] = any(
        bool((a.tensor.view(torch.int32) == 99).any()) for a in again
    )
    channel.send({"op": "exit"})
    process.wait(timeout=60)
    text = json.dumps(result, indent=2)
    print(text)
    if options.out:
        options.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
