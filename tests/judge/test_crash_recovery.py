"""After a crash, the lane's other workers still answer: a crash restarts the verifier
with fresh queues, and workers left from earlier workloads must not talk into the old ones."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = "gdn_decode_qk4_v8_d128_k_last"
CRASH = {
    "name": "crash",
    "definition": DEFINITION,
    "author": "tests",
    "spec": {
        "language": "python",
        "target_hardware": ["cpu"],
        "entry_point": "main.py::run",
        "destination_passing_style": False,
    },
    "sources": [
        {"path": "main.py", "content": "import os\n\n\ndef run(*inputs):\n    os._exit(7)\n"}
    ],
}


def test_a_crash_on_one_workload_costs_only_its_own_rows(tmp_path):
    task = json.loads((ROOT / f"dataset/tasks/{DEFINITION}.json").read_text())
    first, second = task["dev"][:2]
    crash = tmp_path / "crash.json"
    crash.write_text(json.dumps(CRASH))
    report = tmp_path / "results.jsonl"
    finished = subprocess.run(
        [sys.executable, "-m", "inference_kernels.cli", "run", "-d", DEFINITION,
         "--candidate", str(crash), "--workload", first, "--workload", second,
         "--validation-only", "--timeout", "30", "--report", str(report),
         "--cache", str(tmp_path / "cache")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    outcome = {(r["solution"], r["uuid"]): r["status"] for r in rows if r.get("type") == "case"}
    baseline = f"torch_{DEFINITION}"
    assert outcome == {
        (baseline, first): "passed",
        ("crash", first): "crashed",
        (baseline, second): "passed",
        ("crash", second): "crashed",
    }, finished.stdout[-2000:]
