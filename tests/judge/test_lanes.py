"""Lanes share one queue of workloads: with two lanes (two CPU lanes stand for two GPUs),
each lane judges some of them and every case appears exactly once."""

import threading
from collections import Counter
from pathlib import Path

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.dataset.selection import select
from inference_kernels.judge import session
from inference_kernels.judge.session import Request, judge

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = "gdn_decode_qk4_v8_d128_k_last"


def test_two_lanes_judge_every_case_exactly_once(tmp_path, monkeypatch):
    both = threading.Barrier(2, timeout=300)
    calls = Counter()
    lock = threading.Lock()
    run_jobs = session.run_jobs

    def two_lanes_at_once(jobs, devices, options, writer, on_row, before_job):
        def before():  # the first two jobs start together: each lane takes one
            with lock:
                calls["jobs"] += 1
                first_two = calls["jobs"] <= 2
            if first_two:
                both.wait()
            before_job()

        return run_jobs(jobs, devices, options, writer, on_row, before)

    monkeypatch.setattr(session, "run_jobs", two_lanes_at_once)
    lanes = Counter()

    def on_row(row):
        lanes[threading.current_thread().name] += 1

    request = Request(
        definitions=[DEFINITION],
        solutions=None,
        suite="dev",
        devices=["cpu", "cpu"],
        report=tmp_path / "results.jsonl",
        cache=tmp_path / "cache",
        validation_only=True,
        timeout=60,
    )
    dataset = load_dataset(ROOT / "dataset")
    rows = judge(dataset, request, on_row=on_row)
    cases = [row for row in rows if row["type"] == "case"]
    workloads = [w.uuid for _, w in select(dataset, [DEFINITION], "dev")]
    assert len(workloads) == 10
    assert Counter(row["uuid"] for row in cases) == Counter(workloads)  # each once
    assert {row["status"] for row in cases} == {"passed"}
    assert len(lanes) == 2 and sum(lanes.values()) == 10  # both lanes judged
    logs = sorted(p.name for p in (tmp_path / "cache").glob("runs/*/logs/*referee.log"))
    assert logs == ["cpu.0-referee.log", "cpu.1-referee.log"]
