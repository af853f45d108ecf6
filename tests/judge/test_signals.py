"""Freezing and waking a worker's uid (judge/signals.py): the signals come from a small
signaller process rather than from forks of the (large) referee, reach every process of
the uid, and still arrive when the signaller is gone (started again, or a fork of the
referee as before). Run as root, as CI and the judge's sandbox do."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inference_kernels.judge import signals

UID = 61234  # no user of this machine


@pytest.fixture
def sleepers():
    if os.geteuid() != 0:
        pytest.skip("signals to another uid need root (the judge's sandbox has it)")
    started = [
        subprocess.Popen(["sleep", "60"], user=UID, group=UID, extra_groups=[]) for _ in range(3)
    ]
    yield started
    for process in started:
        process.kill()
        process.wait()


def _settled(check, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _signaller_asked(monkeypatch) -> list[int]:
    """The signals the signaller is asked for from now on (it still sends them)."""
    asked: list[int] = []
    send = signals._signaller.send
    monkeypatch.setattr(
        signals._signaller, "send", lambda uid, signum: asked.append(signum) or send(uid, signum)
    )
    return asked


def test_stop_and_continue_every_process_of_the_uid(sleepers):
    pids = {p.pid for p in sleepers}
    assert pids <= set(signals.running(UID))
    signals.signal_uid(UID, signal.SIGSTOP)
    assert _settled(lambda: not set(signals.running(UID)) & pids)  # all stopped
    assert signals._signaller.process is not None  # the signaller did it
    assert signals._signaller.process.poll() is None  # and is not stopped or gone
    signals.signal_uid(UID, signal.SIGCONT)
    assert _settled(lambda: pids <= set(signals.running(UID)))


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="SYS_exit's number is x86-64's")
def test_a_process_whose_first_thread_exited_is_running_while_a_thread_is(sleepers):
    """The first thread of a process leaves by the exit system call (60 on x86-64: that
    thread alone, not the group): /proc/PID/status then says Z while another thread runs
    on (tenth attacker's trial). ``running`` reads the threads of such a process; a
    stopped one is not running."""
    code = (
        "import ctypes, threading, time\n"
        "threading.Thread(target=lambda: [time.sleep(0.001) for _ in iter(int, 1)]).start()\n"
        "ctypes.CDLL(None).syscall(60, 0)\n"
    )
    python = "/usr/bin/python3"  # (the test's own may be where the uid cannot read it)
    if not os.access(python, os.X_OK):
        pytest.skip(f"no {python}")
    process = subprocess.Popen([python, "-c", code], user=UID, group=UID, extra_groups=[])
    try:
        leader = Path(f"/proc/{process.pid}/status")
        assert _settled(lambda: b"State:\tZ" in leader.read_bytes())
        time.sleep(0.05)
        assert process.poll() is None, "the child ended: its thread did not run on"
        assert process.pid in signals.running(UID)
        signals.signal_uid(UID, signal.SIGSTOP)  # as a freeze stops the uid
        assert _settled(lambda: process.pid not in signals.running(UID))
    finally:
        process.kill()
        process.wait()


def test_a_signaller_that_went_away_is_started_again(sleepers):
    signals.signal_uid(UID, signal.SIGCONT)  # a signaller is running
    first = signals._signaller.process
    first.kill()
    first.wait()
    signals.signal_uid(UID, signal.SIGKILL)
    assert _settled(lambda: all(p.poll() is not None for p in sleepers))
    assert signals._signaller.process is not first


def test_without_a_signaller_the_referee_forks_as_before(sleepers, monkeypatch):
    monkeypatch.setattr(signals._signaller, "send", lambda uid, signum: False)
    signals.signal_uid(UID, signal.SIGKILL)
    assert _settled(lambda: all(p.poll() is not None for p in sleepers))


def test_a_workers_thaw_is_its_uids_signal_alone(sleepers, monkeypatch):
    """Only the uid's processes are ever stopped, so waking them needs no scan of /proc;
    a kill still goes down the process tree as well."""
    from types import SimpleNamespace

    from inference_kernels.judge import workers

    scanned = []
    monkeypatch.setattr(workers, "signal_tree", lambda pid, signum: scanned.append(signum))
    handle = SimpleNamespace(uid=UID, process=SimpleNamespace(pid=sleepers[0].pid))
    pids = {p.pid for p in sleepers}
    workers.WorkerHandle._signal(handle, signal.SIGSTOP)
    assert _settled(lambda: not set(signals.running(UID)) & pids)
    workers.WorkerHandle._signal(handle, signal.SIGCONT)
    assert _settled(lambda: pids <= set(signals.running(UID)))  # all of them awake
    assert scanned == []
    workers.WorkerHandle._signal(handle, signal.SIGKILL)
    assert scanned == [signal.SIGKILL]
    assert _settled(lambda: all(p.poll() is not None for p in sleepers))


def test_a_uids_wake_leaves_the_stopped_processes_of_its_session_stopped(sleepers):
    """A SIGCONT reaches any process of the sender's session, whatever its uid: the
    signaller's child leaves the session before it signals, so waking a worker's uid wakes
    nothing else (CI at 41aa8da: the per-sample wake of a worker woke another test's
    stopped process of another uid)."""
    other = subprocess.Popen(["sleep", "60"], user=UID + 1, group=UID + 1, extra_groups=[])
    try:
        os.kill(other.pid, signal.SIGSTOP)
        assert _settled(lambda: other.pid not in signals.running(UID + 1))
        signals.signal_uid(UID, signal.SIGCONT)
        time.sleep(0.2)
        assert other.pid not in signals.running(UID + 1)  # still stopped
        assert {p.pid for p in sleepers} <= set(signals.running(UID))
    finally:
        other.kill()
        other.wait()


def test_a_stop_from_the_referees_own_thread_reaches_the_uid_alone(sleepers, monkeypatch):
    """``stop_uid``: the calling thread takes the uid for its one kill(-1), with no fork
    (neither the signaller nor the referee's), and then its own uid back; a process of
    another uid runs on, as does the referee."""
    import gc

    def forked(*args):
        raise AssertionError("a stop went through a fork")

    monkeypatch.setattr(signals._signaller, "send", forked)
    monkeypatch.setattr(signals, "signal_as", forked)
    other = subprocess.Popen(["sleep", "60"], user=UID + 1, group=UID + 1, extra_groups=[])
    try:
        own = os.getresuid()
        signals.stop_uid(UID)
        assert os.getresuid() == own
        assert gc.isenabled()
        pids = {p.pid for p in sleepers}
        assert _settled(lambda: not set(signals.running(UID)) & pids)  # all stopped
        time.sleep(0.2)
        assert other.pid in signals.running(UID + 1)
        assert _state(os.getpid()) in ("R", "S")
    finally:
        other.kill()
        other.wait()


def test_a_stop_is_never_sent_as_the_referees_own_uid_or_root(monkeypatch):
    monkeypatch.setattr(os, "kill", lambda pid, signum: pytest.fail("a signal was sent"))
    for uid in {0, os.geteuid()}:
        with pytest.raises(ValueError, match="not a worker's own"):
            signals.stop_uid(uid)


def test_a_stop_where_the_thread_cannot_take_the_uid_goes_through_the_signaller(
    sleepers, monkeypatch
):
    monkeypatch.setattr(signals, "_libc", lambda: None)
    asked = _signaller_asked(monkeypatch)
    signals.stop_uid(UID)
    assert asked == [signal.SIGSTOP]
    assert _settled(lambda: not set(signals.running(UID)) & {p.pid for p in sleepers})


_WAKE_AS_A_REFEREE = """
import sys
from inference_kernels.judge import signals

def forked(*args):
    raise SystemExit("a wake went through a fork")

signals._signaller.send = signals.signal_as = forked
signals.wake_uid(int(sys.argv[1]))
"""


def test_a_wake_from_a_referee_that_leads_its_session_reaches_the_uid_alone(sleepers):
    """``wake_uid`` in a process that leads a session of its own, as the referee does:
    from its thread, no fork; the uid's processes run again, a stopped process of another
    uid in another session (here, this test's) stays stopped."""
    other = subprocess.Popen(["sleep", "60"], user=UID + 1, group=UID + 1, extra_groups=[])
    pids = {p.pid for p in sleepers}
    try:
        os.kill(other.pid, signal.SIGSTOP)
        signals.stop_uid(UID)
        assert _settled(lambda: not set(signals.running(UID)) & pids)
        assert _settled(lambda: other.pid not in signals.running(UID + 1))
        woke = subprocess.run(
            [sys.executable, "-c", _WAKE_AS_A_REFEREE, str(UID)],
            start_new_session=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert woke.returncode == 0, woke.stderr
        assert _settled(lambda: pids <= set(signals.running(UID)))  # all of them awake
        time.sleep(0.2)
        assert other.pid not in signals.running(UID + 1)  # still stopped
    finally:
        other.kill()
        other.wait()


def test_a_wake_outside_a_session_of_its_own_goes_through_the_signaller(sleepers, monkeypatch):
    """Here (a test's process, in the session of whatever started it) a wake from this
    thread would reach every stopped process of the session: it goes through the
    signaller."""
    assert os.getsid(0) != os.getpid()
    asked = _signaller_asked(monkeypatch)
    pids = {p.pid for p in sleepers}
    signals.stop_uid(UID)
    assert _settled(lambda: not set(signals.running(UID)) & pids)
    signals.wake_uid(UID)
    assert asked == [signal.SIGCONT]
    assert _settled(lambda: pids <= set(signals.running(UID)))


def test_the_worker_is_stopped_before_the_referee_reads_a_samples_reply(tmp_path, monkeypatch):
    """A sample's worker is halted as its reply arrives, before the referee parses it, maps
    what it announces and copies the checked call's outputs: what the reply names is what
    the worker had computed. (Running on, a thread of a solution's computed a sample's calls
    after the reply while the referee mapped the 4,096 buffers it announced: passed at 9.1
    us a call where the calls took 46-63; CPU, red team at 3cbba3c.)"""
    from inference_kernels.judge import protocol

    seen: list[str] = []
    parse = protocol.parse
    with _baseline_referee(tmp_path) as (referee, message):

        def parsing(answer, *expected):
            if protocol.Sample in expected:  # (a stop lands within microseconds of its
                pid = _worker_pid(referee)  # signal; unhalted, nothing stops it)
                seen.append("T" if _settled(lambda: _state(pid) == "T", 0.5) else _state(pid))
            return parse(answer, *expected)

        monkeypatch.setattr(protocol, "parse", parsing)
        verdict = referee.judge(message)
    assert verdict["status"] == "passed", verdict
    assert len(seen) >= 4  # the calibration's, the sizing's and the timed samples'
    assert set(seen) == {"T"}, seen


def test_the_worker_is_done_with_its_reply_before_the_next_inputs(tmp_path, monkeypatch):
    """Halted from its reply through the referee's copy and compare, the worker is woken and
    waited for (``catch_up``: it answers a "wake" once back waiting) before the next
    sample's inputs are written (and halted for them): what it does after a reply (the
    collection it put off) is not left for the next sample's time. (CI at c95b1dd, woken
    only for the next go, and at ee7affe, woken but not waited for: honest eager baselines
    seen at 4,389 and 2,035 us a call from outside where they took 371 and 479, under
    load.)"""
    from inference_kernels.judge.sets import InputSets
    from inference_kernels.judge.workers import WorkerHandle

    log: list[str] = []
    ask, write = WorkerHandle.ask, InputSets.refresh

    def asking(self, message, *args, **kwargs):
        log.append(message["op"])
        return ask(self, message, *args, **kwargs)

    def refreshing(self, windows, fresh):
        log.append("refresh")
        write(self, windows, fresh)

    monkeypatch.setattr(WorkerHandle, "ask", asking)
    monkeypatch.setattr(InputSets, "refresh", refreshing)
    with _baseline_referee(tmp_path) as (referee, message):
        verdict = referee.judge(message)
    assert verdict["status"] == "passed", verdict
    refreshes = [i for i, op in enumerate(log) if op == "refresh"]
    assert len(refreshes) >= 4
    for i in refreshes:  # each after a wake answered, nothing asked between
        assert log[i - 1] == "wake", log[max(0, i - 4) : i + 1]


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/status") as status:
        return next(line.split()[1] for line in status if line.startswith("State:"))


@contextlib.contextmanager
def _baseline_referee(tmp_path):
    """A CPU referee in this process with a workload of ``candidates.DEFINITION`` prepared
    for its baseline, timed eagerly: (the referee, its judge message); closed after."""
    sys.path.insert(0, str(Path(__file__).parent))
    from candidates import prepared_referee

    referee, message = prepared_referee(tmp_path, ["eager"])
    try:
        yield referee, message
    finally:
        referee.close()


def _worker_pid(referee) -> int:
    (worker,) = referee.workers.values()
    return worker.process.pid


def test_the_worker_is_stopped_while_a_samples_inputs_are_written(tmp_path, monkeypatch):
    """While the referee writes a sample's fresh inputs into the sets the worker maps, the
    worker runs nothing, and it runs again for the sample. (Running, a thread of a
    solution's computed each set's GEMM as its inputs were written, outside both clocks:
    passed at 31.8 us a call where the calls took 294.7; CPU, red team at 366baf1.)"""
    from inference_kernels.judge.sets import InputSets

    seen: list[tuple[str, str]] = []
    write = InputSets.refresh
    with _baseline_referee(tmp_path) as (referee, message):

        def refresh(self, windows, fresh):
            # (a stop pending on a runnable process, under load, takes a moment to show;
            # the process runs nothing of its own before it: CI at a5621bb saw one "R")
            pid = _worker_pid(referee)
            before = "T" if _settled(lambda: _state(pid) == "T", 0.5) else _state(pid)
            write(self, windows, fresh)
            seen.append((before, _state(_worker_pid(referee))))

        monkeypatch.setattr(InputSets, "refresh", refresh)
        verdict = referee.judge(message)
    assert verdict["status"] == "passed", verdict
    assert len(seen) >= 4  # the calibration's, the sizing's and the timed samples'
    assert all(state == ("T", "T") for state in seen), seen  # stopped all along


def test_a_samples_time_from_outside_begins_as_its_worker_can_run_again(tmp_path, monkeypatch):
    """Whatever keeps the referee from its clock once the worker runs again is the sample's
    time: a candidate's 32 processes in sessions of their own, woken by the wake's signal,
    kept the referee from its clock for 2-25 ms and computed the sample's calls meanwhile
    (passed at 14.7-35.7 us a call where they take 241-314; CPU, a helper's trial at
    363b789). Here every wake keeps the referee 0.2 s after its signal."""
    from inference_kernels.judge import workers

    thaw = workers.WorkerHandle.thaw

    def slow_thaw(self):
        woken = thaw(self)
        if woken is not None:
            time.sleep(0.2)
        return woken

    monkeypatch.setattr(workers.WorkerHandle, "thaw", slow_thaw)
    with _baseline_referee(tmp_path) as (referee, message):
        verdict = referee.judge(message)
    eager = verdict["timing"]["eager"]
    seconds = [us * eager["calls_per_sample"] / 1e6 for us in eager["outside"]["samples_us"]]
    assert min(seconds) > 0.2, seconds
    assert verdict["status"] == "timing_suspect"  # (0.2 s a sample the worker's clock lacks)


def test_a_wake_by_scan_passes_once_and_says_when_it_began(monkeypatch):
    """Without a uid of its own a worker is signalled by a scan of its process tree: a stop
    or a kill scans three times (for what forked meanwhile), a wake once (a stopped
    process forks nothing), and the wake's time is taken before its first signal: the
    sample's clock starts there, so later scans would count against the worker."""
    tree = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)",
        ]
    )
    try:
        time.sleep(0.5)
        scans = []
        descendants = signals.descendants
        monkeypatch.setattr(
            signals, "descendants", lambda root: scans.append(root) or descendants(root)
        )
        signals.signal_tree(tree.pid, signal.SIGSTOP)
        pids = descendants(tree.pid)
        assert len(pids) == 2 and len(scans) == 3
        assert _settled(lambda: all(_state(pid) == "T" for pid in pids))
        scans.clear()
        before = time.perf_counter()
        woken = signals.signal_tree(tree.pid, signal.SIGCONT)
        assert len(scans) == 1 and before <= woken <= time.perf_counter()
        assert _settled(lambda: all(_state(pid) in ("S", "R") for pid in pids))
    finally:
        signals.signal_tree(tree.pid, signal.SIGKILL)
        tree.wait()
