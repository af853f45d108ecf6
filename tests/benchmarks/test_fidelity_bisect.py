"""benchmarks/fidelity_bisect.py runs unattended on a lent GPU: its bisection must name the
first commit with the new times, step over commits whose code cannot run, and keep what it
measured. Here on a repository of ten commits, with the GPU's figures made up."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fidelity_bisect  # noqa: E402


def repository(tmp_path: Path, count: int) -> tuple[Path, list[str]]:
    repo = tmp_path / "origin"
    (repo / "src").mkdir(parents=True)
    (repo / "benchmarks").mkdir()
    run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    for index in range(count):
        (repo / "src" / "index.txt").write_text(str(index))
        (repo / "benchmarks" / "b.txt").write_text("b")
        run("add", "-A")
        run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"commit {index}")
    log = subprocess.run(
        ["git", "-C", str(repo), "rev-list", "--reverse", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    bundle = tmp_path / "repo.bundle"
    run("bundle", "create", str(bundle), "--all")
    return bundle, log


@pytest.mark.parametrize("broken", [[], [5], [4, 5, 6]])
def test_the_bisection_names_the_first_commit_with_the_new_times(tmp_path, monkeypatch, broken):
    bundle, commits = repository(tmp_path, 10)
    monkeypatch.setattr(fidelity_bisect, "WORK", tmp_path / "work")
    measured = []

    def turn(tree: Path, runs: int) -> dict:
        index = int((tree / "src" / "index.txt").read_text())
        measured.append(index)
        if index in broken:
            raise RuntimeError("this commit's code cannot run the benchmark")
        gemm = 571.0 if index >= 5 else 528.0  # commit 5 made the GEMM slower
        return {"gemm": {"graph": {"median_us": gemm}}, "sdpa": {"graph": {"median_us": 164.0}}}

    monkeypatch.setattr(fidelity_bisect, "turn", turn)
    out = tmp_path / "bisect.jsonl"
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "x",
            "--bundle",
            str(bundle),
            "--good",
            commits[0],
            "--bad",
            commits[-1],
            "--out",
            str(out),
            "--deadline",
            "60",
        ],
    )
    fidelity_bisect.main()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    result = lines[-1]
    assert result["steered_by"] == "gemm" and result["gaps"]["sdpa"] == 0.0
    assert len(lines) - 1 == len(measured)  # every measurement kept, as it came
    if not broken:
        assert result["result"] == "found" and result["first_bad"] == commits[5][:12]
        assert result["last_good"] == commits[4][:12]
        assert len(measured) <= 2 + 4  # the ends and a bisection of eight commits
    else:  # the broken commits stay in the interval, named
        assert result["result"] == "interval"
        assert result["last_good"] == commits[min(broken) - 1][:12]
        assert result["first_bad"] == commits[max(broken) + 1][:12]
        assert result["skipped"] == sorted(commits[i][:12] for i in broken)
    assert all(
        line["side"]["gemm"] == ("bad" if line["index"] >= 5 else "good")
        for line in lines[:-1]
        if line.get("graph_us") and "side" in line
    )
