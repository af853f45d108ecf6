"""The device's measured peaks, the other half of a roofline (dataset/rooflines.py: the
least work of a workload): dense BF16 and FP8 tensor throughput, FP32 without tensor cores,
memory bandwidth, and the time of one empty kernel in a CUDA graph (the floor under any
bound: a tiny decode is not held to less than a launch).

Each figure is the best of several CUDA-graph replays (events), after a warm-up, with the
SM clock read right after (NVML); on the CPU, wall clock and small sizes, indicative only.
Printed as JSON, the provenance with it (device, driver, torch, sizes, method):

    PYTHONPATH=src python3 benchmarks/peaks.py [--device cuda] [--write dataset/hardware/h200.json]
    PYTHONPATH=src python3 benchmarks/peaks.py --from-report peaks.json --write TABLE.json

``--write`` also writes the figures as the dataset's hardware table for the device
(``schema.Hardware``), where a row's least work is held to them. FP8 x FP4 is held to the
FP8 peak: Hopper and older have no FP4 tensor units (re-measure it on a device that has).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import torch
from replays import replay_us

REPLAYS = 7


def _best_seconds(work: Callable[[], object], repeat: int, device: torch.device) -> float:
    """Seconds per ``work()``: the best of REPLAYS timings of ``repeat`` calls (a CUDA graph
    of them on CUDA, a loop on the CPU)."""
    for _ in range(3):
        work()
    if device.type != "cuda":
        times = []
        for _ in range(REPLAYS):
            began = time.perf_counter()
            for _ in range(repeat):
                work()
            times.append((time.perf_counter() - began) / repeat)
        return min(times)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(repeat):
            work()
    graph.replay()  # warm
    torch.cuda.synchronize(device)
    return min(replay_us(graph, repeat, REPLAYS)) / 1e6


def bf16_tflops(n: int, device: torch.device) -> float:
    a = torch.randn(n, n, device=device).bfloat16()
    b = torch.randn(n, n, device=device).bfloat16()
    out = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    seconds = _best_seconds(lambda: torch.mm(a, b, out=out), 10, device)
    return 2 * n**3 / seconds / 1e12


def fp8_tflops(n: int, device: torch.device) -> float:
    """torch._scaled_mm on e4m3 operands (cuBLASLt FP8), BF16 out, per-tensor scales."""
    a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()  # column-major, as needed
    one = torch.ones((), device=device)
    seconds = _best_seconds(
        lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
        10,
        device,
    )
    return 2 * n**3 / seconds / 1e12


def fp32_tflops(n: int, device: torch.device) -> float:
    """FP32 products without TF32: the CUDA cores' rate (matrix-vector work like GDN's)."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    out = torch.empty(n, n, device=device)
    allowed = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        seconds = _best_seconds(lambda: torch.mm(a, b, out=out), 3, device)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed
    return 2 * n**3 / seconds / 1e12


def memory_ways(size: int, device: torch.device) -> dict[str, float]:
    """TB/s of three ways to stream ``size`` bytes: a copy by the copy engines (``copy_``
    of one dtype is a device-to-device memcpy) and a copy and a read by SM kernels (an
    elementwise product, a sum). A copy moves 2 * size bytes, a read size. On the H200 the
    memcpy reached 2.72 TB/s, well below what kernels stream: the peak is the best way."""
    source = torch.empty(size // 4, dtype=torch.float32, device=device).fill_(1)
    target = torch.empty_like(source)
    total = torch.empty((), dtype=torch.float32, device=device)
    ways = {
        "copy_engine": (lambda: target.copy_(source), 2),
        "sm_copy": (lambda: torch.mul(source, 1.0, out=target), 2),
        "sm_read": (lambda: torch.sum(source, dim=0, out=total), 1),
    }
    return {
        name: round(moved * size / _best_seconds(work, 5, device) / 1e12, 3)
        for name, (work, moved) in ways.items()
    }


def memory_tb_s(size: int, device: torch.device, report: dict) -> float:
    """The best of ``memory_ways``, each kept in ``report``."""
    ways = memory_ways(size, device)
    report["memory_ways_tb_s"] = ways
    return max(ways.values())


def empty_kernel_us(device: torch.device) -> float:
    """One one-element kernel after another in a graph: the least any launch costs."""
    x = torch.zeros(1, device=device)
    return _best_seconds(lambda: x.add_(1), 1000, device) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--write", help="also write the hardware table (schema.Hardware) here")
    parser.add_argument(
        "--from-report",
        metavar="JSON",
        help="measure nothing: write the table (--write) from a report this printed before",
    )
    options = parser.parse_args()
    if options.from_report:
        if not options.write:
            sys.exit("--from-report: name the table to write with --write")
        write_table(json.loads(Path(options.from_report).read_text()), options.write)
        return
    device = torch.device(options.device)
    cuda = device.type == "cuda"
    n, size = (8192, 4 << 30) if cuda else (512, 256 << 20)
    report: dict[str, object] = {
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "method": f"best of {REPLAYS} CUDA-graph replays, events"
        if cuda
        else f"best of {REPLAYS} wall-clock loops (indicative)",
        "sizes": {"matmul_n": n, "copy_bytes": size},
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    figures = {
        "bf16_tflops": lambda: bf16_tflops(n, device),
        "fp8_tflops": lambda: fp8_tflops(n, device),
        "fp32_tflops": lambda: fp32_tflops(n, device),
        "memory_tb_s": lambda: memory_tb_s(size, device, report),
        "empty_kernel_us": lambda: empty_kernel_us(device),
    }
    for name, measure in figures.items():
        try:
            report[name] = round(measure(), 3)
        except Exception as error:  # FP8 where the device or build has none: say so
            report[name] = None
            report[f"{name}_error"] = f"{type(error).__name__}: {error}"[:300]
    if cuda:
        from inference_kernels.judge import clocks

        read = clocks.reader(device)
        reading = read() if read else None
        report["sm_mhz"] = reading.sm_mhz if reading else None
    print(json.dumps(report, indent=2))
    if options.write:
        write_table(report, options.write)


def write_table(report: dict, path: str) -> None:
    """The figures as the device's hardware table; refused when one could not be measured."""
    from inference_kernels.schema import Hardware

    names = ("bf16_tflops", "fp8_tflops", "fp32_tflops", "memory_tb_s", "empty_kernel_us")
    missing = [name for name in names if report.get(name) is None]
    if missing:
        sys.exit(f"--write: not measured here: {', '.join(missing)}")
    table = Hardware(
        device=report["device"],
        tflops={
            "bf16": report["bf16_tflops"],
            "fp8": report["fp8_tflops"],
            "fp8xfp4": report["fp8_tflops"],  # no FP4 tensor units before Blackwell
            "fp32": report["fp32_tflops"],
        },
        memory_tb_s=report["memory_tb_s"],
        empty_kernel_us=report["empty_kernel_us"],
        provenance={
            "command": "benchmarks/peaks.py",
            "measured_at": report.get("measured_at")
            or datetime.now(UTC).isoformat(timespec="seconds"),
            **{
                k: report[k]
                for k in ("torch", "cuda", "method", "sizes", "memory_ways_tb_s", "note")
                if k in report
            },
            "sm_mhz": report.get("sm_mhz"),
        },
    )
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(table.model_dump_json(indent=2) + "\n")


if __name__ == "__main__":
    main()
