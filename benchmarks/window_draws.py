"""What drawing a sample's secret windows costs the referee (``Fresh.draw``).

Before every sample the referee draws a secret window per floating input for each call
(``judge/fresh.py``): three offsets since the forty-first session, one before. Drawn one
offset at a time from ``random.SystemRandom`` (a read of the system's randomness each),
4,000 calls of three inputs, one offset each, took 18-19 ms on the CI machine, and on the
H200 a 4,000-call graph's samples came 55 ms apart where the gap is 20 ms. Prints the
milliseconds of both ways, per try, for ``--calls`` windows of the bias GEMM's three inputs
(x 384 x 384, bias 384, weight 64 x 384, as spans of their pools), with the collector
frozen and paused as in a case. (Forty-first session, three offsets each: one by one
50-56 ms, ``draw`` 3.7-5.3 ms.)

    PYTHONPATH=src python3 benchmarks/window_draws.py [--calls 4000] [--tries 5]
"""

from __future__ import annotations

import argparse
import json
import random
import time

import torch

from inference_kernels.judge import collector
from inference_kernels.judge.fresh import Fresh


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--tries", type=int, default=5)
    options = parser.parse_args()
    fresh = Fresh([torch.randn(384 * 384), torch.randn(384), torch.randn(64 * 384)])
    system = random.SystemRandom()
    one_by_one, at_once = [], []
    collector.freeze()  # as the referee runs a case: frozen, paused (collector.py)
    for _ in range(options.tries):
        with collector.paused():
            began = time.perf_counter()
            for _ in range(options.calls):
                {
                    index: tuple(system.randrange(span + 1) for _ in range(3))
                    for index, span in fresh.spans.items()
                }
            one_by_one.append(round((time.perf_counter() - began) * 1e3, 2))
            began = time.perf_counter()
            fresh.draw(options.calls)
            at_once.append(round((time.perf_counter() - began) * 1e3, 2))
    print(json.dumps({"calls": options.calls, "one_by_one_ms": one_by_one, "draw_ms": at_once}))


if __name__ == "__main__":
    main()
