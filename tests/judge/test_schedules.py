"""Options that shape the timing schedule reach the referee's sampler."""

import json
from pathlib import Path

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge.session import Request, judge

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = "gdn_decode_qk4_v8_d128_k_last"


def test_cold_l2_times_single_calls(tmp_path):
    request = Request(
        definitions=[DEFINITION],
        report=tmp_path / "results.jsonl",
        cache=tmp_path / "cache",
        cold_l2=True,
        timeout=60,
    )
    rows = judge(load_dataset(ROOT / "dataset"), request)
    (row,) = [r for r in rows if r["type"] == "case"]
    assert row["status"] == "passed", row.get("error")
    timing = row["timing"]
    assert timing["schedule"]["iters"] == 1
    assert timing["eager"]["calls_per_sample"] == 1  # never sampled again with more calls
    eager = timing["eager"]
    assert len(eager["samples_us"]) == timing["schedule"]["trials"]
    low, high = eager["median_interval_us"]  # statistics of the samples, kept in the row
    assert low == min(eager["samples_us"]) <= eager["median_us"] <= high == max(eager["samples_us"])
    assert json.loads(request.report.read_text().splitlines()[1])["timing"] == timing
