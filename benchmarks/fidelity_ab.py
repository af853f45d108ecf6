"""Timing fidelity before and after a change, on one GPU: the judge of two source trees,
run in turns (A, B, A, B, ...), each run judging ``timing_fidelity.py``'s two baselines
(five copies each, sandboxed) in a process of its own with that tree's code.

Medians of different GPUs are not comparable (a GPU's own figure, docs/measurements/
h200-regimes.md); turns on one GPU are. Prints JSON: per tree and shape, each turn's graph
and eager medians (the median of its five copies), and B over A.

    git archive OLD src benchmarks | tar -x -C results/old     # the tree before
    PYTHONPATH=src python3 benchmarks/fidelity_ab.py --tree results/old --tree . --turns 2

A tree may carry variables for its judge, to put an experiment's setting beside the
default on one GPU: ``--tree . --tree .@INFERENCE_KERNELS_SETS_CAP_BYTES=4294967296``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# One turn, in the tree's own code: its timing_fidelity.judged(sandboxed=True), summarized.
TURN = """
import json, sys
sys.path[:0] = [sys.argv[1] + "/src", sys.argv[1] + "/benchmarks"]
import pathlib
import timing_fidelity as t
t.ROOT = pathlib.Path.cwd()  # the dataset of this checkout, for every tree
if len(sys.argv) > 2:  # copies of each baseline (fidelity_bisect.py's --runs)
    t.RUNS = int(sys.argv[2])
rows = t.judged(True)
print("FIGURES " + json.dumps({s: {m: t.figures(r, m) for m in ("graph", "eager")}
                               for s, r in rows.items()}))
"""


# triton's do_bench_cudagraph on the same calls, after each turn (this checkout's code): the
# yardstick both trees were first held to (within 3%, h200-timing-fidelity.md), in the
# state the GPU is in at that moment.
TRITON = """
import json, sys
sys.path[:0] = ["src", "benchmarks"]
import timing_fidelity as t
print("TRITON " + json.dumps({s: round(t.triton_us(s), 2) for s in t.SHAPES}))
"""


def triton_turn() -> dict[str, float] | None:
    """triton's medians by shape, or None where triton is not installed."""
    done = subprocess.run(
        [sys.executable, "-c", TRITON], cwd=ROOT, capture_output=True, text=True, check=False
    )
    for line in done.stdout.splitlines():
        if line.startswith("TRITON "):
            return json.loads(line[len("TRITON ") :])
    return None


def variant(spec: str) -> tuple[Path, dict[str, str]]:
    """A ``--tree``: ``PATH`` or ``PATH@NAME=VALUE[@NAME=VALUE...]``, the tree's judge run
    with those variables set (an experiment's knob)."""
    path, *assignments = spec.split("@")
    env = {}
    for assignment in assignments:
        name, equals, value = assignment.partition("=")
        if not equals or not name:
            raise SystemExit(f"--tree {spec}: {assignment!r} is not NAME=VALUE")
        env[name] = value
    return Path(path).resolve(), env


def turn(tree: Path, runs: int | None = None, extra: dict[str, str] | None = None) -> dict:
    env = dict(
        os.environ,
        **(extra or {}),
        PYTHONPATH=":".join(
            [str(tree / "src"), *[p for p in os.environ.get("PYTHONPATH", "").split(":") if p]]
        ),
    )
    done = subprocess.run(
        [sys.executable, "-c", TURN, str(tree), *([str(runs)] if runs else [])],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith("FIGURES "):
            return json.loads(line[len("FIGURES ") :])
    raise RuntimeError(f"{tree}: no figures (exit {done.returncode}): {done.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tree",
        action="append",
        required=True,
        help="a source tree, PATH or PATH@NAME=VALUE (its judge run with that variable set)",
    )
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument(
        "--triton",
        action="store_true",
        help="after each turn, time the same calls with triton's do_bench_cudagraph",
    )
    options = parser.parse_args()
    variants = {spec: variant(spec) for spec in options.tree}
    # a tree's key: its resolved path, and the variables it runs with
    keys = {
        spec: "@".join([str(path), *(f"{k}={v}" for k, v in env.items())])
        for spec, (path, env) in variants.items()
    }
    trees = [keys[spec] for spec in options.tree]
    if len(set(trees)) < len(trees):
        raise SystemExit("--tree: the same tree and variables twice")
    runs: dict[str, list[dict]] = {tree: [] for tree in trees}
    triton: dict[str, list[dict | None]] = {tree: [] for tree in trees}  # after each turn
    for _ in range(options.turns):
        for spec in options.tree:
            tree, (path, env) = keys[spec], variants[spec]
            runs[tree].append(turn(path, extra=env))  # each turn's figures also to stderr
            print(f"turn {tree}: {json.dumps(runs[tree][-1])}", file=sys.stderr, flush=True)
            if options.triton:
                triton[tree].append(triton_turn())
                print(f"triton: {json.dumps(triton[tree][-1])}", file=sys.stderr, flush=True)
    report: dict = {"trees": list(trees), "turns": options.turns, "shapes": {}}
    for shape in runs[trees[0]][0]:
        entry: dict = {}
        for tree in trees:
            after = [t[shape] for t in triton[tree] if t]
            if after:
                graph = statistics.median(r[shape]["graph"]["median_us"] for r in runs[tree])
                entry.setdefault(tree, {})["triton_after_turns_us"] = after
                entry[tree]["graph_over_triton"] = round(graph / statistics.median(after), 4)
            for method in ("graph", "eager"):
                medians = [r[shape][method]["median_us"] for r in runs[tree]]
                entry.setdefault(tree, {})[method] = {
                    "turns_us": medians,
                    "median_us": round(statistics.median(medians), 2),
                    "statuses": sorted(
                        {s for r in runs[tree] for s in r[shape][method]["statuses"]}
                    ),
                    # (trees before issue 13 do not record clocks)
                    "sm_mhz": [r[shape][method].get("sm_mhz") for r in runs[tree]],
                }
        if len(trees) == 2:
            a, b = (entry[t] for t in trees)
            entry["b_over_a"] = {
                m: round(b[m]["median_us"] / a[m]["median_us"], 4) for m in ("graph", "eager")
            }
        report["shapes"][shape] = entry
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
