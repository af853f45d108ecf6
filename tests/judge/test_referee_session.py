"""A lane's referee leads a session of its own (so that a worker's wake from its thread
reaches nothing of the run's session, signals.wake_uid), and so no longer gets what is sent
to the run's process group or session (a closed terminal's hangup, a kill of the group): it
ends by itself once the run that spawned it has gone, its workers with it, whether the run
died after the referee came up or while it still started."""

import os
import signal
import subprocess
import sys
import time

from candidates import ROOT

RUN = """
import os, signal, sys, threading, time
from pathlib import Path
from inference_kernels.judge.lane import Lane
from inference_kernels.judge.scheduler import Options

folder = Path(sys.argv[1])
options = Options(data_root=Path(sys.argv[2]), cache=folder / "cache", folder=folder)
lane = Lane(device="cpu", options=options, writer=None, on_row=lambda row: None)
if sys.argv[3] == "started":
    assert lane._start()["op"] == "hello"
    print(lane.process.pid, flush=True)
    time.sleep(600)
threading.Thread(target=lane._start, daemon=True).start()
while lane.process is None or lane.process.pid is None:
    time.sleep(0.001)
print(lane.process.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # the run dies (a crash, a kill) as its referee starts
"""


def _gone(pid: int) -> bool:
    """Exited (a zombie no one reaped counts: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _run(tmp_path, when: str) -> tuple[subprocess.Popen, int]:
    """A run with a CPU lane, killed once its referee has come up or as it starts; (the run,
    its referee's pid)."""
    run = subprocess.Popen(
        [sys.executable, "-c", RUN, str(tmp_path), str(ROOT / "dataset"), when],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # (a killed run's resource tracker complains of its locks)
        text=True,
    )
    return run, int(run.stdout.readline())


def _ends(referee: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not _gone(referee) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _gone(referee)


def test_a_referee_leads_its_session_and_ends_when_its_run_is_killed(tmp_path):
    run, referee = _run(tmp_path, "started")
    try:
        assert os.getsid(referee) == referee  # a session of its own
        assert os.getsid(referee) != os.getsid(run.pid)
        os.kill(run.pid, signal.SIGKILL)  # no atexit, no signal to its children
        run.wait()
        assert _ends(referee, 30), "the referee outlived its run"
    finally:
        run.kill()
        if not _gone(referee):
            os.kill(referee, signal.SIGKILL)


def test_a_referee_whose_run_dies_while_it_starts_ends_too(tmp_path):
    """The referee's start (torch and the judge imported) takes seconds; a parent read when
    it is done would be init's pid, and the referee would wait for requests for ever (a
    helper's review of ff36a99)."""
    run, referee = _run(tmp_path, "starting")
    run.wait()
    try:
        log = tmp_path / "logs" / "cpu-referee.log"
        deadline = time.monotonic() + 180
        while not log.exists() and not _gone(referee) and time.monotonic() < deadline:
            time.sleep(0.2)  # until referee.main has begun
        assert _ends(referee, 15), "the referee outlived its run"
    finally:
        if not _gone(referee):
            os.kill(referee, signal.SIGKILL)
