"""What Python's garbage collector costs the referee when a worker names a graph's outputs.

A worker that sets up a CUDA graph of 4,000 calls names every call's outputs in its
``ready`` (``Worker._graph_refs``); the referee decodes that message (``channel``) and
validates it (``protocol.parse``): thousands of objects at once, in a process that holds
torch, the judge and the dataset. This benchmark does that on the CPU, in a process
holding the same, ``--tries`` times, keeping the last two messages (a case's graph lives
until the next), in three modes: the collector as Python leaves it (``plain``), the
objects of the start frozen (``freeze``), and frozen with the collector paused, as the
judge runs a case since the nineteenth session (``paused``, ``judge/collector.py``). Each
mode runs in a process of its own; prints one JSON line per mode: the milliseconds of each
try and of each full collection that fell in them.

    PYTHONPATH=src python3 benchmarks/collector_pause.py [--tries 12] [--calls 4000]
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("plain", "freeze", "paused")


def ready(calls: int) -> bytes:
    """A worker's ``ready`` for a graph of ``calls`` calls of one bf16 output each."""
    refs = [
        [{"buffer": i // 500, "offset": (i % 500) * 3072, "dtype": "bfloat16",
          "shape": [4, 384], "stride": [384, 1]}]
        for i in range(calls)
    ]  # fmt: skip
    handles = [{"id": k, "kind": "cuda", "handle": "ab" * 64, "size": 2 << 20} for k in range(8)]
    message = {"op": "ready", "method": "graph", "outputs": refs, "buffers": handles}
    return json.dumps(message, separators=(",", ":")).encode()


def run(mode: str, tries: int, calls: int) -> dict:
    import torch  # noqa: F401  (the referee's heap: torch, the judge, the dataset)

    from inference_kernels.dataset.layout import load_dataset
    from inference_kernels.judge import channel, collector, protocol, referee  # noqa: F401

    dataset = load_dataset(ROOT / "dataset")
    if mode != "plain":
        collector.freeze()
    if mode == "paused":
        gc.disable()
    full: list[float] = []
    began = [0.0]

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        elif info["generation"] == 2:
            full.append(round((time.perf_counter() - began[0]) * 1e3, 1))

    gc.callbacks.append(note)
    body, kept, times = ready(calls), [], []
    for _ in range(tries):
        start = time.perf_counter()
        message = json.loads(
            body,
            object_pairs_hook=channel._object,
            parse_int=channel._int,
            parse_float=channel._float,
        )
        parsed = protocol.parse(message, protocol.Ready, protocol.Unavailable)
        times.append(round((time.perf_counter() - start) * 1e3, 1))
        kept = [*kept, parsed][-2:]
    return {
        "mode": mode,
        "objects_tracked": len(gc.get_objects()),
        "workloads_loaded": sum(len(w) for w in dataset.workloads.values()),
        "decode_and_validate_ms": times,
        "full_collections_ms": full,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=12)
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--mode", choices=MODES, help="one mode, in this process")
    options = parser.parse_args()
    if options.mode:
        print(json.dumps(run(options.mode, options.tries, options.calls)), flush=True)
        return
    for mode in MODES:  # each in a fresh process: a freeze cannot be undone cleanly
        argv = [sys.argv[0], "--mode", mode, "--tries", str(options.tries)]
        argv += ["--calls", str(options.calls)]
        subprocess.run([sys.executable, *argv], check=True)


if __name__ == "__main__":
    main()
