"""What stopping and waking a worker's uid costs the referee: a stop from its own thread
(``signals.stop_uid``), then a wake through the signaller (a fork that leaves for a session
of its own) or from the thread (``signals.wake_uid`` in a process that leads its session,
as the referee does). Root only (a worker's uid of its own). Prints JSON: microseconds per
signal, median and 90th percentile over ``--rounds`` rounds, with three processes of the uid.

    sudo PYTHONPATH=src python3 benchmarks/wake_cost.py
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

from inference_kernels.judge import signals

UID = 61235


def _timed(action, after, rounds: int) -> dict[str, float]:
    """Microseconds ``action`` took, each round followed by ``after`` (untimed)."""
    took = []
    for _ in range(rounds):
        began = time.perf_counter()
        action()
        took.append((time.perf_counter() - began) * 1e6)
        after()
    took.sort()
    return {
        "median_us": round(statistics.median(took), 1),
        "p90_us": round(took[int(0.9 * len(took))], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("wake_cost.py: needs root (a uid of the worker's own)")
    if os.getsid(0) != os.getpid():  # a session of its own, as the referee's (referee.main)
        again = subprocess.run([sys.executable, *sys.argv], start_new_session=True)
        raise SystemExit(again.returncode)
    sleepers = [
        subprocess.Popen(["sleep", "600"], user=UID, group=UID, extra_groups=[]) for _ in range(3)
    ]
    try:
        signals.stop_uid(UID)  # (each timed wake follows a stop)
        stop = lambda: signals.stop_uid(UID)  # noqa: E731
        wake = lambda: signals.wake_uid(UID)  # noqa: E731
        results = {
            "stop, this thread": _timed(stop, wake, args.rounds),
            "wake, signaller": _timed(
                lambda: signals.signal_uid(UID, signal.SIGCONT), stop, args.rounds
            ),
            "wake, this thread": _timed(wake, stop, args.rounds),
        }
        print(json.dumps(results, indent=1))
    finally:
        for process in sleepers:
            process.kill()


if __name__ == "__main__":
    main()
