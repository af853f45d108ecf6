"""Signals to a worker and everything it started: freeze between cases, wake, kill.

Under root each worker has a uid of its own, so that uid is its whole sandbox: a process
that becomes the uid and calls kill(-1) reaches all of them at once, under one kernel
lock, a fork in flight included (Linux's kill(-1) spares only init and the caller). That
process used to be a fork of the referee, twice a case (freeze, wake): a fork copies the
page tables of the referee, whose torch, CUDA context and inputs make it large, and on
this 2-core machine a process of 1 GB took 63 ms to fork. Now the forks come from a
signaller: a small Python process (no torch) the referee starts once, which runs as the
referee's own user, so that no solution can signal, trace or stop it (``signaller.py``). It
forks a child per request that becomes the uid and signals. Should it be gone, the referee
forks as before.

A stop, the one signal whose moment counts (a sample's reply, ``WorkerHandle.halt``), needs
no fork at all: the referee's calling thread takes the uid as its real and effective uid for
the one kill(-1) and then its own back (``stop_uid``; a thread's credentials are its own,
and the other threads of the referee keep theirs), about 30-60 us on the CI machine where the
signaller's fork took about 1 ms, and 4-20 ms under load. A SIGCONT reaches any process of
the sender's session, whatever its uid: a wake goes so only where the referee leads a session
of its own (``referee.main`` makes one; every worker has its own), where nothing the judge
stops lives (``wake_uid``); elsewhere, as in a test's process, it goes through the
signaller, whose child leaves for a session of its own first.

Without root (no uid of its own) a worker's processes are found by a scan of /proc from
its root process.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from .signaller import signal_as


class _Signaller:
    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.lock = threading.Lock()

    def send(self, uid: int, signum: int) -> bool:
        """Signal every process of ``uid`` through the signaller (started on first use);
        False when it cannot (the caller then forks itself)."""
        with self.lock:
            for _ in range(2):  # one restart, for a signaller that went away
                if self.process is None or self.process.poll() is not None:
                    self.process = subprocess.Popen(
                        [sys.executable, "-I", "-S", str(Path(__file__).with_name("signaller.py"))],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        close_fds=True,
                    )
                try:
                    self.process.stdin.write(f"{uid} {signum}\n".encode())
                    self.process.stdin.flush()
                    if self.process.stdout.readline():
                        return True
                except OSError:
                    pass
                self.process.kill()
                self.process = None
            return False


_signaller = _Signaller()


def signal_uid(uid: int, signum: int) -> None:
    """Signal every process of ``uid`` at once (see the module's doc)."""
    if not _signaller.send(uid, signum):
        signal_as(uid, signum)


_SETRESUID = {"x86_64": 117, "aarch64": 147}.get(platform.machine())  # the syscall's number
_PR_GET_SECUREBITS, _SECBIT_NO_SETUID_FIXUP = 27, 1 << 2


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, where this thread may take another uid alone: Linux, root, and a
    change of uid that drops the thread's capabilities (without them its kill(-1) reaches
    the uid's processes only; with them, every process)."""
    if _SETRESUID is None or os.geteuid() != 0:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_GET_SECUREBITS, 0, 0, 0, 0) & _SECBIT_NO_SETUID_FIXUP:
        return None
    return libc


def _setresuid(libc: ctypes.CDLL, ids: tuple[int, int, int]) -> bool:
    """This thread's real, effective and saved uid (the raw call: the C library's setuid
    changes every thread of the process)."""
    return libc.syscall(_SETRESUID, *(ctypes.c_long(i) for i in ids)) == 0


@contextlib.contextmanager
def _as_uid(libc: ctypes.CDLL, uid: int) -> Iterator[bool]:
    """This thread alone as ``uid``, its real and effective uid (the saved one stays its own,
    to come back by), with no collection meanwhile (no finalizer of the referee's runs as
    the uid); yields whether it is."""
    own = os.getresuid()
    collecting = gc.isenabled()
    gc.disable()
    try:
        changed = _setresuid(libc, (uid, uid, own[1]))
        try:
            yield changed and os.getresuid()[:2] == (uid, uid)
        finally:
            if changed and (not _setresuid(libc, own) or os.getresuid() != own):
                raise RuntimeError("the referee's thread could not take its own uid back")
    finally:
        if collecting:
            gc.enable()


def stop_uid(uid: int) -> None:
    """SIGSTOP every process of ``uid`` at once, from this thread (see the module's doc);
    through the signaller where this thread cannot take the uid."""
    if _from_this_thread(uid, signal.SIGSTOP) is None:
        signal_uid(uid, signal.SIGSTOP)


def wake_uid(uid: int) -> float:
    """SIGCONT every process of ``uid`` at once: from this thread where this process leads
    a session of its own (the referee's, ``referee.main``), through the signaller else.
    Returns the ``perf_counter`` at which the uid could first run again (taken right
    before the signal, or before the signaller was asked)."""
    if os.getsid(0) == os.getpid():
        woken = _from_this_thread(uid, signal.SIGCONT)
        if woken is not None:
            return woken
    woken = time.perf_counter()
    signal_uid(uid, signal.SIGCONT)
    return woken


def _from_this_thread(uid: int, signum: int) -> float | None:
    """Signal every process of ``uid`` from this thread, as the uid for one kill(-1): the
    ``perf_counter`` right before the signal, or None where this thread cannot take the
    uid (never root, nor the referee's own uid)."""
    if uid in (0, *os.getresuid()):  # (its kill(-1) would reach the machine, or the referee)
        raise ValueError(f"uid {uid} is not a worker's own")
    libc = _libc()
    if libc is None:
        return None
    sent = None
    with _as_uid(libc, uid) as taken:
        if taken:
            sent = time.perf_counter()
            with contextlib.suppress(ProcessLookupError):  # (none of the uid is left)
                os.kill(-1, signum)
    return sent


def descendants(root: int) -> list[int]:
    """``root`` and every process below it (a detached one is reparented to the sandbox's
    init, itself below ``root``)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending += children.get(pid, [])
    return found


def signal_tree(root: int, signum: int) -> float:
    """Signal ``root`` and what runs below it, by a scan of /proc: a process that forks
    and exits faster than the scan can stay ahead of it (see ``signal_uid``). Returns the
    ``perf_counter`` right before the first signal (a wake's: the sample's clock starts
    there, so a wake scans once; a stopped process forks nothing to scan for again)."""
    first = None
    for _ in range(1 if signum == signal.SIGCONT else 3):  # again, for what forked meanwhile
        for pid in descendants(root):
            if first is None:
                first = time.perf_counter()
            try:
                os.kill(pid, signum)
            except OSError:
                pass
    return time.perf_counter() if first is None else first


AWAKE = (b"R", b"S", b"D")  # the states of a thread that is not stopped (or dead)


def running(uid: int) -> list[int]:
    """Processes of ``uid`` (their real uid) that are not stopped (or dead). Each freeze
    scans /proc once or more: the status files are searched for their two fields, not
    parsed whole (half the time of a parse into fields, 23 ms a freeze on the H200 host).
    A process whose first thread has exited shows that thread's state, a zombie's, while
    its other threads may run on: its threads are read too (tenth attacker's trial)."""
    found = []
    wanted = str(uid).encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as status:
                owner, state = fields(status.read())
        except OSError:
            continue
        if owner == wanted and (state in AWAKE or (state == b"Z" and _threads_awake(name))):
            found.append(int(name))
    return found


def _threads_awake(pid: str) -> bool:
    """Is a thread of process ``pid`` not stopped (or dead)?"""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/status", "rb") as status:
                if fields(status.read())[1] in AWAKE:
                    return True
        except OSError:
            continue
    return False


def belongs(pid: int, uid: int | None, root: int) -> bool:
    """Is ``pid`` a process of the worker whose uid is ``uid`` (its real uid), or, for a
    worker without a uid of its own, ``root`` or a process below it? (A few reads of /proc,
    for the few processes NVML lists: not a scan.)"""
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/status", "rb") as status:
                text = status.read()
        except OSError:
            return False
        if uid is not None:
            return fields(text)[0] == str(uid).encode()
        if pid == root:
            return True
        parent = text.rfind(b"\nPPid:\t")
        if parent < 0:
            return False
        pid = int(text[parent + 7 :].split(b"\n", 1)[0])
    return False


def fields(status: bytes) -> tuple[bytes | None, bytes | None]:
    """A /proc status file's real uid and state letter. Both are searched from the end:
    the first line is the process's own name, which it chooses (the kernel escapes a newline
    in it; were it not to, a name holding a false state line would come before the true one)."""
    owner, state = status.rfind(b"\nUid:\t"), status.rfind(b"\nState:\t")
    if owner < 0 or state < 0:
        return None, None
    return status[owner + 6 :].split(b"\t", 1)[0], status[state + 8 : state + 9]
