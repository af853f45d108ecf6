"""Which commit changed the judge's times? A bisection on one GPU that needs no one at the
keyboard: each step judges ``timing_fidelity.py``'s two baselines with one commit's code
(``fidelity_ab.turn``) and goes left or right by itself.

The commits between GOOD and BAD come from a git bundle (the device has no network and no
repository). Both ends are measured first, on this GPU: a shape whose graph medians differ
by less than MIN_GAP between them is not bisected. A commit is on BAD's side for a shape
when its graph median is nearer BAD's than GOOD's. The shape with the larger gap steers the
bisection; every commit measured is classified for both, so a second cause shows as a
shape that flips elsewhere. Each measurement is appended to OUT as one JSON line at once
(a run cut short keeps what it measured), and the last line names the first commit on
BAD's side, or the interval left (the deadline came, or the commits in it cannot run).

    git bundle create results/repo.bundle --all            # here; carry results/repo.bundle
    python3 benchmarks/fidelity_bisect.py --bundle results/repo.bundle --good 783f85f \\
        --bad 4713084 --runs 3 --deadline 540 --out $OUT/bisect.jsonl
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fidelity_ab import turn  # noqa: E402

MIN_GAP = 0.02  # the run-to-run floor of a GPU time (stats.py)
WORK = Path("/tmp/ik-bisect")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def tree(repo: Path, commit: str) -> Path:
    """The commit's ``src`` and ``benchmarks``, unpacked once."""
    folder = WORK / "trees" / commit
    if not folder.exists():
        folder.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", commit, "src", "benchmarks"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def graph_medians(figures: dict) -> dict[str, float]:
    return {shape: entry["graph"]["median_us"] for shape, entry in figures.items()}


def side(value: float, good: float, bad: float) -> str:
    """ "bad" when ``value`` is nearer ``bad`` than ``good``."""
    return "bad" if abs(value - bad) < abs(value - good) else "good"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--good", required=True, help="a commit with the old times")
    parser.add_argument("--bad", required=True, help="a later commit with the new times")
    parser.add_argument("--runs", type=int, default=3, help="copies of each baseline a step")
    parser.add_argument("--deadline", type=float, default=540.0, help="seconds for it all")
    parser.add_argument("--out", type=Path, required=True)
    options = parser.parse_args()
    began = time.monotonic()
    repo = WORK / "repo"
    if not repo.exists():
        subprocess.run(["git", "clone", "-q", str(options.bundle), str(repo)], check=True)
    good, bad = (git(repo, "rev-parse", c).strip() for c in (options.good, options.bad))
    commits = [good, *git(repo, "rev-list", "--reverse", f"{good}..{bad}").split()]
    out = options.out.open("a")

    def measure(index: int) -> dict[str, float] | None:
        commit = commits[index]
        started = time.monotonic()
        try:
            medians = graph_medians(turn(tree(repo, commit), options.runs))
        except Exception as error:  # a commit whose code cannot run this benchmark
            medians, failure = None, f"{type(error).__name__}: {error}"[-600:]
        else:
            failure = None
        line = {
            "index": index,
            "commit": commit[:12],
            "subject": git(repo, "log", "-1", "--format=%s", commit).strip()[:160],
            "graph_us": medians,
            "error": failure,
            "seconds": round(time.monotonic() - started, 1),
        }
        if medians and ends:
            line["side"] = {s: side(v, ends[0][s], ends[1][s]) for s, v in medians.items()}
        out.write(json.dumps(line) + "\n")
        out.flush()
        print(json.dumps(line), flush=True)
        return medians

    ends: list[dict[str, float]] = []
    first, last = measure(0), measure(len(commits) - 1)
    if first is None or last is None:
        raise SystemExit("an end of the range could not be measured")
    ends[:] = [first, last]
    gaps = {s: abs(last[s] / first[s] - 1) for s in first}
    if max(gaps.values()) < MIN_GAP:
        out.write(json.dumps({"result": "no difference", "gaps": gaps}) + "\n")
        return
    steer = max(gaps, key=gaps.get)
    low, high = 0, len(commits) - 1  # low on GOOD's side, high on BAD's
    skipped: set[int] = set()  # commits whose code could not run it
    step = (time.monotonic() - began) / 2  # seconds a step, from the two ends
    while time.monotonic() - began + 1.2 * step < options.deadline:
        between = [i for i in range(low + 1, high) if i not in skipped]
        if not between:
            break
        middle = between[len(between) // 2]
        medians = measure(middle)
        if medians is None:
            skipped.add(middle)
        elif side(medians[steer], first[steer], last[steer]) == "bad":
            high = middle
        else:
            low = middle
    result = {
        "result": "found" if high - low == 1 else "interval",
        "steered_by": steer,
        "gaps": {s: round(g, 4) for s, g in gaps.items()},
        "last_good": commits[low][:12],
        "first_bad": commits[high][:12],
        "first_bad_subject": git(repo, "log", "-1", "--format=%s", commits[high]).strip(),
        "commits_left": high - low - 1,
        "skipped": sorted(commits[i][:12] for i in skipped if low < i < high),
    }
    out.write(json.dumps(result) + "\n")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
