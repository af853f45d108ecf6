"""The run options that pick one part of issue 14's judging on the GPU: the definitions
whose name matches KERNELS (those with the task baseline alone too: the table's speed of
light is every definition's), each as ``-d NAME``, then, where SOLUTIONS is given, that
definition's solutions matching it, each as ``-s NAME`` (a definition none of whose
solutions match is left out). One option or value a line, for ``mapfile`` in
scripts/gpu_judge.sh's kernels step.

    KERNELS='sparse_mla|qsa' SOLUTIONS='^(?!compile_)' python3 scripts/kernel_picks.py
    python3 scripts/kernel_picks.py --kernels gdn --solutions '^(compile_|torch_)'
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def solution_definitions(dataset: Path) -> dict[str, str]:
    """Each solution's name -> its definition's, from the dataset's solution files."""
    found = [json.loads(p.read_text()) for p in (dataset / "solutions").rglob("*.json")]
    return {s["name"]: s["definition"] for s in found}


def picks(dataset: Path, kernels: str, solutions: str | None) -> list[str]:
    """``-d``/``-s`` options and their values, in order (definitions sorted, then names)."""
    found = solution_definitions(dataset)
    names = sorted(set(found.values()))
    options: list[str] = []
    for name in filter(re.compile(kernels).search, names):
        mine = sorted(s for s, d in found.items() if d == name)
        kept = [s for s in mine if re.search(solutions, s)] if solutions else []
        if solutions and not kept:
            continue
        options += ["-d", name]
        for solution in kept:
            options += ["-s", solution]
    return options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", default=os.environ.get("KERNELS", "."))
    parser.add_argument("--solutions", default=os.environ.get("SOLUTIONS") or None)
    parser.add_argument("--dataset", type=Path, default=ROOT / "dataset")
    args = parser.parse_args()
    sys.stdout.write(
        "".join(f"{option}\n" for option in picks(args.dataset, args.kernels, args.solutions))
    )


if __name__ == "__main__":
    main()
