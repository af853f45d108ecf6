"""Whether programmatic dependent launch (PDL, sm_90) lets a timed call overlap the call
before it, and what between two calls stops that (tests/exploits/test_pdl_overlap.py).

A kernel of one program spins ``--spin-us`` on the device's global timer. It is launched
``--calls`` times back to back and timed with CUDA events: as a plain launch; with PDL,
letting the next launch start at once and never waiting for the one before (the attack);
and with PDL and, between calls, an event recorded or a one-element memset (a fence the
judge could put there). Each eagerly, and the plain, PDL and memset-fenced ones also as
one CUDA graph of the same calls, and in a graph with an external event recorded between
calls (an event-record node: not a kernel, so no programmatic edge runs through it), plain
and with PDL; and captured as the judge's worker captures (``timing.capture``: the calls
put in order, ``call_order.py``), plain and with PDL. Prints JSON: microseconds per call
of each, for the spin given and for a spin of 2 us, where a fence's own cost shows. A time
per call well under the spin is calls running together; a fenced plain time over the plain
one is what the fence would cost every solution. GPU only (on an H100 at 3cbba3c, 20 us:
PDL 0.62 us a call in a graph, 24.55 eagerly; `docs/measurements/sandbox/h100-pdl-
fence-3cbba3c.json`):

    PYTHONPATH=src python3 benchmarks/pdl_fence.py > pdl-fence.json
"""

from __future__ import annotations

import argparse
import json

import torch
import triton
import triton.language as tl

from inference_kernels.judge import timing


@triton.jit
def _spin(out_ptr, SPIN_NS: tl.constexpr, LET_NEXT: tl.constexpr):
    if LET_NEXT:  # the next launch (with PDL) may start now; this one never waits
        tl.extra.cuda.gdc_launch_dependents()
    start = tl.extra.cuda.globaltimer()
    now = start
    while now - start < SPIN_NS:
        now = tl.extra.cuda.globaltimer()
    tl.store(out_ptr, (now - start).to(tl.int32))


def _one(out: torch.Tensor, i: int, spin_ns: int, pdl: bool):
    def call() -> list[torch.Tensor]:
        _spin[(1,)](out[i:], SPIN_NS=spin_ns, LET_NEXT=pdl, launch_pdl=pdl)
        return [out[i : i + 1]]

    return call


def timed(calls: int, spin_ns: int, pdl: bool, fence: str, graph: bool) -> float:
    """Microseconds per call of ``calls`` launches of _spin."""
    out = torch.zeros(calls, dtype=torch.int32, device="cuda")
    marks = [torch.cuda.Event(external=fence == "event node") for _ in range(calls)]

    def launches() -> None:
        for i in range(calls):
            _spin[(1,)](out[i:], SPIN_NS=spin_ns, LET_NEXT=pdl, launch_pdl=pdl)
            if fence in ("event", "event node"):
                marks[i].record()
            elif fence == "memset":
                out[i : i + 1].zero_()

    launches()  # compiled and warm
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if fence == "judge":  # captured as the worker captures: calls put in order
        captured, _ = timing.capture(
            [_one(out, i, spin_ns, pdl) for i in range(calls)], 1, out.device
        )
        torch.cuda.synchronize()
        start.record()
        captured.replay()
    elif graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            launches()
        captured.replay()
        torch.cuda.synchronize()
        start.record()
        captured.replay()
    else:
        start.record()
        launches()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--spin-us", type=float, default=20.0)
    args = parser.parse_args()
    cases = [
        ("plain", False, "none", False),
        ("pdl", True, "none", False),
        ("pdl, event between", True, "event", False),
        ("pdl, memset between", True, "memset", False),
        ("plain, graph", False, "none", True),
        ("pdl, graph", True, "none", True),
        ("plain, memset between, graph", False, "memset", True),
        ("pdl, memset between, graph", True, "memset", True),
        ("plain, event node between, graph", False, "event node", True),
        ("pdl, event node between, graph", True, "event node", True),
        ("plain, the judge's capture", False, "judge", True),
        ("pdl, the judge's capture", True, "judge", True),
    ]
    results: dict = {"device": torch.cuda.get_device_name()}
    for spin_us in dict.fromkeys((args.spin_us, 2.0)):
        times = results.setdefault(f"spin {spin_us:g} us", {})
        for name, pdl, fence, graph in cases:
            try:
                us = timed(args.calls, int(spin_us * 1000), pdl, fence, graph)
                times[name] = round(us, 2)
            except Exception as error:  # (a graph that cannot hold it)
                times[name] = f"error: {str(error).splitlines()[0][:160]}"
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
