"""A run killed with SIGKILL and resumed ends with each case exactly once; a run stopped
with SIGTERM takes its worker processes with it; a crash on one workload costs only the
crashing solution's rows."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from candidates import DEFINITION, ROOT, SOLUTIONS, write_candidate

from inference_kernels.cli.judge_commands import _exit_on_sigterm

SLOW_MAIN = """import time

from .honest import decode


def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    time.sleep(0.4)
    return decode(q, k, v, state, A_log, a, dt_bias, b, scale)
"""


def case_rows(report: Path) -> list[dict]:
    rows = []
    for line in report.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("type") == "case":
            rows.append(row)
    return rows


def command(report: Path, candidate: Path, cache: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "inference_kernels.cli",
        "run",
        "-d",
        DEFINITION,
        "--suite",
        "dev",
        "--only-candidates",
        "--candidate",
        str(candidate),
        "--report",
        str(report),
        "--cache",
        str(cache),
        "--timeout",
        "60",
        *extra,
    ]


def slow_candidate(tmp_path: Path) -> Path:
    return write_candidate(tmp_path, "slow", SLOW_MAIN)


def test_killed_run_resumes_with_every_case_once(tmp_path):
    candidate = slow_candidate(tmp_path)
    report, cache = tmp_path / "results.jsonl", tmp_path / "cache"
    process = subprocess.Popen(
        command(report, candidate, cache),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if report.exists() and len([r for r in case_rows(report) if r["solution"] == "slow"]) >= 3:
            break
        time.sleep(0.2)
    children = [pid for pid in _children(process.pid) if _running(pid)]  # the referee among them
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    # The referee leads a session of its own (signals.wake_uid), out of the group's reach: it
    # ends itself once its run is gone, in the middle of a case too (an orphan at 0ea5557
    # waited for requests for ever)
    deadline = time.monotonic() + 30
    while any(_running(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [pid for pid in children if _running(pid)] == []
    before = [r for r in case_rows(report) if r["solution"] == "slow"]
    assert 3 <= len(before) < 10
    with report.open("a") as stream:
        stream.write('{"type": "case", "definition": "torn')  # a row cut off by the kill
    finished = subprocess.run(
        command(report, candidate, cache, "--resume"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    after = [r for r in case_rows(report) if r["solution"] == "slow"]
    assert finished.returncode == 0, finished.stderr  # every case passed
    assert len(after) == 10
    assert len({r["uuid"] for r in after}) == 10
    assert all(r["status"] == "passed" for r in after)
    assert after[: len(before)] == before  # nothing written before the kill was lost
    environments = [
        json.loads(line) for line in report.read_text().splitlines() if '"environment"' in line
    ]
    assert [e["resumed"] for e in environments] == [False, True]


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigterm_stops_the_run_and_its_worker_processes(tmp_path):
    """As GNU ``timeout`` does: SIGTERM to the run, then to its whole process group (the
    run's own workers included). The run stops with 143 and no traceback (a second
    SIGTERM while unwinding printed one on the H200), taking its processes with it."""
    report, cache = tmp_path / "results.jsonl", tmp_path / "cache"
    candidate = slow_candidate(tmp_path)
    stderr = tmp_path / "stderr.txt"
    process = subprocess.Popen(
        command(report, candidate, cache),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=stderr.open("w"),
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (report.exists() and case_rows(report)):
        time.sleep(0.2)
    children = [pid for pid in _children(process.pid) if _running(pid)]
    assert len(children) >= 1  # the referee (and a resource tracker); its workers are below it
    process.send_signal(signal.SIGTERM)
    os.killpg(process.pid, signal.SIGTERM)
    assert process.wait(timeout=60) == 143
    time.sleep(1)
    assert [pid for pid in children if _running(pid)] == []
    assert "Traceback" not in stderr.read_text(), stderr.read_text()[-2000:]


def test_a_crash_on_one_workload_costs_only_its_own_rows(tmp_path):
    """A crash once restarted the verifier on fresh queues, and the other solution's worker,
    kept from the first workload, answered on the old ones (it timed out)."""
    task = json.loads((ROOT / f"dataset/tasks/{DEFINITION}.json").read_text())
    first, second = task["dev"][:2]
    crash = write_candidate(tmp_path, "crash", (SOLUTIONS / "crash.py").read_text())
    report = tmp_path / "results.jsonl"
    finished = subprocess.run(
        [sys.executable, "-m", "inference_kernels.cli", "run", "-d", DEFINITION,
         "--candidate", str(crash), "--workload", first, "--workload", second,
         "--validation-only", "--timeout", "30", "--report", str(report),
         "--cache", str(tmp_path / "cache")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    outcome = {(r["solution"], r["uuid"]): r["status"] for r in case_rows(report)}
    baseline = f"torch_{DEFINITION}"
    assert outcome == {
        (baseline, first): "passed",
        ("crash", first): "crashed",
        (baseline, second): "passed",
        ("crash", second): "crashed",
    }, finished.stdout[-2000:]


def test_only_the_first_sigterm_raises():
    """Deterministic half of the test above: the second of two SIGTERMs can land while the
    first still unwinds (whether it does is a race), so after the first the handler is one
    that does nothing."""
    before = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
        with pytest.raises(SystemExit) as exited:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs in the main thread between bytecodes
        assert exited.value.code == 143
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)  # reached: the second signal raised nothing
        assert signal.getsignal(signal.SIGTERM) not in (_exit_on_sigterm, signal.SIG_DFL)
    finally:
        signal.signal(signal.SIGTERM, before)
