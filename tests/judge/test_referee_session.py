"""A lane's referee leads a session of its own (so that a worker's wake from its thread
reaches nothing of the run's session, signals.wake_uid), and so no longer gets what is sent
to the run's process group or session (a closed terminal's hangup, a kill of the group): it
ends by itself once the run that started it has gone, its workers with it."""

import os
import signal
import subprocess
import sys
import time

from candidates import ROOT

RUN = """
import sys, time
from pathlib import Path
from inference_kernels.judge.lane import Lane
from inference_kernels.judge.scheduler import Options

folder = Path(sys.argv[1])
options = Options(data_root=Path(sys.argv[2]), cache=folder / "cache", folder=folder)
lane = Lane(device="cpu", options=options, writer=None, on_row=lambda row: None)
assert lane._start()["op"] == "hello"
print(lane.process.pid, flush=True)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    """Exited (a zombie no one reaped counts: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_referee_leads_its_session_and_ends_when_its_run_is_killed(tmp_path):
    run = subprocess.Popen(
        [sys.executable, "-c", RUN, str(tmp_path), str(ROOT / "dataset")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        referee = int(run.stdout.readline())
        assert os.getsid(referee) == referee  # a session of its own
        assert os.getsid(referee) != os.getsid(run.pid)
        os.kill(run.pid, signal.SIGKILL)  # no atexit, no signal to its children
        run.wait()
        deadline = time.monotonic() + 30
        while not _gone(referee) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _gone(referee), "the referee outlived its run"
    finally:
        run.kill()
