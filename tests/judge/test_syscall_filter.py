"""What a worker may not do to the scheduler or to its halts: the system-call filter
(judge/syscall_filter.py), its program run by an interpreter of classic BPF written here,
the calls it refuses inside a real sandbox (and a timer that wakes a stopped worker without
it), and the priority limits (sandbox.limits)."""

import os
import platform
import resource
import signal
import struct
import subprocess
import sys
import time

import pytest

from inference_kernels.judge.sandbox import Sandbox, apply_limits, bwrap_path, limits, probe
from inference_kernels.judge.signals import descendants, signal_tree
from inference_kernels.judge.syscall_filter import (
    ALLOW,
    HOSTS,
    NO_SUCH_CALL,
    PRETENDED,
    REFUSE,
    FilterUnavailable,
    opened_program,
    program,
)

X86_64, I386, AARCH64 = 0xC000003E, 0x40000003, 0xC00000B7
NICE_LIMITS = (resource.RLIMIT_NICE, resource.RLIMIT_RTPRIO)
CONT = int(signal.SIGCONT)


def _run(code: bytes, nr: int, arch: int, *args: int) -> int:
    """What the filter returns for call ``nr`` of ABI ``arch`` with ``args`` (the opcodes
    it uses)."""
    values = [*args, *[0] * (6 - len(args))]
    data = struct.pack("<iIQ6Q", nr, arch, 0, *values)  # struct seccomp_data
    instructions = [struct.unpack("<HBBI", code[i : i + 8]) for i in range(0, len(code), 8)]
    a, pc = 0, 0
    while True:
        op, yes, no, k = instructions[pc]
        if op == 0x20:
            a = struct.unpack_from("<I", data, k)[0]
        elif op == 0x54:
            a &= k
        elif op in (0x15, 0x35):
            taken = a == k if op == 0x15 else a >= k
            pc += yes if taken else no
        elif op == 0x06:
            return k
        else:
            raise AssertionError(f"opcode {op:#x}")
        pc += 1


# Each ABI's numbers, from the kernel's tables (arch/x86/entry/syscalls/syscall_64.tbl,
# include/uapi/asm-generic/unistd.h), written out apart from the filter's own
NUMBERS = {
    "x86_64": {
        "refused": [112, 314, 144, 142, 222, 244, 101, 425, 426, 427],
        # kill, tkill, rt_sigqueueinfo, pidfd_send_signal (signal second); tgkill,
        # rt_tgsigqueueinfo (third)
        "senders": ([62, 200, 129, 424], [234, 297]),
        "setpgid": 109,
        "clone3": 435,
        "clone, fcntl, prctl": (56, 72, 157),
        # read, getpid, fork, getsid, getpgid, timer_settime, setitimer, sched_getattr,
        # rt_sigaction, sched_setaffinity
        "allowed": [0, 39, 57, 124, 121, 223, 38, 315, 13, 203],
    },
    "aarch64": {
        "refused": [157, 274, 119, 118, 107, 184, 117, 425, 426, 427],
        "senders": ([129, 130, 138, 424], [131, 240]),
        "setpgid": 154,
        "clone3": 435,
        "clone, fcntl, prctl": (220, 25, 167),
        "allowed": [63, 172, 156, 155, 110, 275, 134, 122],
    },
}
ARCHES = {"x86_64": X86_64, "aarch64": AARCH64}


@pytest.mark.parametrize("machine", list(NUMBERS))
def test_the_program_refuses_exactly_the_named_calls(machine):
    numbers, arch, code = NUMBERS[machine], ARCHES[machine], program(machine)
    assert [_run(code, nr, arch) for nr in numbers["refused"]] == [REFUSE] * 10
    assert _run(code, numbers["setpgid"], arch, 0, 0) == PRETENDED  # (0: "done")
    assert _run(code, numbers["clone3"], arch) == NO_SUCH_CALL
    allowed = numbers["allowed"]
    assert [_run(code, nr, arch) for nr in allowed] == [ALLOW] * len(allowed)
    # a signal sent: refused when it is SIGCONT, whatever the target
    second, third = numbers["senders"]
    for nr in second:
        assert _run(code, nr, arch, 7, CONT) == REFUSE
        assert _run(code, nr, arch, 0xFFFFFFFF, CONT, 0) == REFUSE  # (kill(-1, ...))
        assert [_run(code, nr, arch, 7, sig) for sig in (0, 9, 10, 19)] == [ALLOW] * 4
    for nr in third:
        assert _run(code, nr, arch, 7, 8, CONT) == REFUSE
        assert [_run(code, nr, arch, 7, CONT, sig) for sig in (0, 9, 19)] == [ALLOW] * 3
    clone, fcntl, prctl = numbers["clone, fcntl, prctl"]
    # clone: refused only with SIGCONT as the child's exit signal (fork's is SIGCHLD; a
    # thread's 0)
    assert _run(code, clone, arch, 0x100 | CONT) == REFUSE
    assert _run(code, clone, arch, (1 << 40) | 0x3D0F00 | CONT) == REFUSE
    assert _run(code, clone, arch, 0x1200000 | 17) == ALLOW
    assert _run(code, clone, arch, 0x3D0F00) == ALLOW
    # fcntl: F_SETSIG (10) alone; F_SETOWN (8), F_GETFL (3), F_SETFL (4) allowed
    assert _run(code, fcntl, arch, 5, 10, CONT) == REFUSE
    assert _run(code, fcntl, arch, 5, 10, 0) == REFUSE
    assert [_run(code, fcntl, arch, 5, cmd) for cmd in (8, 3, 4, 1030)] == [ALLOW] * 4
    # prctl: PR_SET_PDEATHSIG (1) with SIGCONT alone
    assert _run(code, prctl, arch, 1, CONT) == REFUSE
    assert _run(code, prctl, arch, 1, 9) == ALLOW
    assert _run(code, prctl, arch, 15, CONT) == ALLOW  # PR_SET_NAME
    assert _run(code, prctl, arch, 2, 0) == ALLOW


def test_every_call_of_another_abi_is_refused():
    # x86_64's 32-bit entry (int 0x80: setsid is 66 there) and its x32 numbers
    code = program("x86_64")
    assert [_run(code, nr, I386) for nr in (66, 20, 3)] == [REFUSE] * 3
    assert _run(code, 0x40000000 | 112, X86_64) == REFUSE
    assert _run(code, 0x40000000 | 39, X86_64) == REFUSE
    assert _run(program("aarch64"), 157, 0x40000028) == REFUSE  # arm32 on arm64


def test_an_unknown_architecture_has_no_program():
    with pytest.raises(FilterUnavailable, match="x86_64 and aarch64, not riscv64"):
        program("riscv64")
    assert set(HOSTS) == {"x86_64", "aarch64"}


SCRIPT = r"""
import ctypes, os, signal, struct, subprocess, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
def call(*args):
    result = libc.syscall(*args)
    return "ok" if result >= 0 else os.strerror(ctypes.get_errno())
attr = struct.pack("<IIQiIQQQII", 56, 0, 0, 0, 0, 100000, 0, 0, 0, 1024)  # a 0.1 ms slice
slice_ = ctypes.create_string_buffer(attr)
param = ctypes.create_string_buffer(struct.pack("<i", 0))
event = ctypes.create_string_buffer(struct.pack("<qii", 0, signal.SIGCONT, 0) + bytes(48))
timer = ctypes.c_int()
read, write = os.pipe()
moved = "import os; g = os.getpgrp(); os.setpgid(0, 0); print(os.getpgrp() != g)"
group = [sys.executable, "-c", moved]
print("setpgid", subprocess.run(group, capture_output=True, text=True).stdout.strip())
print("setsid", call(112))
print("sched_setattr", call(314, 0, slice_, 0))
print("sched_setscheduler", call(144, 0, 0, param))
print("sched_setparam", call(142, 0, param))
print("timer_create", call(222, 1, event, ctypes.byref(timer)))  # SIGCONT, not armed
print("mq_notify", call(244, -1, None))
print("fcntl_setsig", call(72, read, 10, signal.SIGCONT))
print("fcntl_getfl", call(72, read, 3))
print("pdeathsig_cont", call(157, 1, signal.SIGCONT))
print("pdeathsig_kill", call(157, 1, signal.SIGKILL))
call(157, 1, 0)
print("clone_cont", call(56, 0x800 | signal.SIGCONT, 0, 0, 0, 0))  # (CLONE_SIGHAND alone: EINVAL)
print("clone3", call(435, None, 0))
me = os.getpid()
signal.signal(signal.SIGCONT, lambda *a: None)
print("kill_cont", call(62, me, signal.SIGCONT))
print("kill_zero", call(62, me, 0))
print("tkill_cont", call(200, threading.get_native_id(), signal.SIGCONT))
print("tgkill_cont", call(234, me, threading.get_native_id(), signal.SIGCONT))
print("sigqueue_cont", call(129, me, signal.SIGCONT, None))
print("tgsigqueue_cont", call(297, me, threading.get_native_id(), signal.SIGCONT, None))
print("pidfd_cont", call(424, -1, signal.SIGCONT, None, 0))
sleeper = subprocess.Popen(["sleep", "30"])
print("ptrace", call(101, 0x4206, sleeper.pid, 0, 0))  # PTRACE_SEIZE of its child
sleeper.kill()
sleeper.wait()
print("io_uring", call(425, 1, None))
print("x32_getpid", call(0x40000000 | 39))
print("getpid", call(39))
thread = threading.Thread(target=lambda: None)
thread.start()
thread.join()
print("thread ok")
print("child", subprocess.run(["echo", "runs"], capture_output=True, text=True).stdout.strip())
try:
    subprocess.run(["true"], start_new_session=True)
    print("new_session ok")
except OSError as error:
    print("new_session", error.strerror)
"""
REFUSED, NO_CALL, INVALID = (
    "Operation not permitted",
    "Function not implemented",
    "Invalid argument",
)


def _sandboxed(folder, script: str, before_exec=None) -> dict[str, str]:
    """What ``script`` prints (a word, then what it saw) run by Python in a sandbox under
    the worker's filter; skips where no sandbox can be made."""
    ok, why = probe(bwrap_path())
    if not ok:
        pytest.skip(why)
    with opened_program() as syscalls:
        command = Sandbox(bwrap_path(), secrets=[]).command(
            folder, False, [sys.executable, "-c", script], syscalls
        )
        done = subprocess.run(
            command, capture_output=True, text=True, pass_fds=[syscalls], preexec_fn=before_exec
        )
    assert done.returncode == 0, done.stderr
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the script's call numbers")
def test_a_sandboxed_process_is_refused_those_calls_and_nothing_else(tmp_path):
    inside = _sandboxed(tmp_path, SCRIPT)
    assert inside == {
        "setsid": REFUSED,
        "setpgid": "False",  # (told it was done: a group of its own, unmade)
        "sched_setattr": REFUSED,
        "sched_setscheduler": REFUSED,
        "sched_setparam": REFUSED,
        "timer_create": REFUSED,
        "mq_notify": REFUSED,
        "fcntl_setsig": REFUSED,
        "fcntl_getfl": "ok",
        "pdeathsig_cont": REFUSED,
        "pdeathsig_kill": "ok",
        "clone_cont": REFUSED,
        "clone3": NO_CALL,
        "kill_cont": REFUSED,
        "kill_zero": "ok",
        "tkill_cont": REFUSED,
        "tgkill_cont": REFUSED,
        "sigqueue_cont": REFUSED,
        "tgsigqueue_cont": REFUSED,
        "pidfd_cont": REFUSED,
        "ptrace": REFUSED,
        "io_uring": REFUSED,
        "x32_getpid": REFUSED,
        "getpid": "ok",
        "thread": "ok",
        "child": "runs",
        "new_session": REFUSED,
    }
    # outside the sandbox, the same calls are the host's to make (or the kernel's to refuse)
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True)
    outside = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    outside.pop("x32_getpid")  # (ENOSYS where the kernel has no x32)
    assert outside == {
        **{key: "ok" for key in inside if key != "x32_getpid"},
        "setpgid": "True",
        "mq_notify": "Bad file descriptor",
        "clone_cont": INVALID,
        "clone3": INVALID,
        "sigqueue_cont": "Bad address",
        "tgsigqueue_cont": "Bad address",
        "pidfd_cont": "Bad file descriptor",
        "io_uring": "Bad address",
        "child": "runs",
    }


WAKER = r"""
import ctypes, os, signal, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
signal.signal(signal.SIGCONT, lambda *a: None)  # (ignored, a SIGCONT parks the timer)
event = ctypes.create_string_buffer(struct.pack("<qii", 0, signal.SIGCONT, 0) + bytes(48))
said = "ok"
for period in (1_000_000, 1_300_000, 1_700_000):  # SIGCONT every 1-1.7 ms, three times
    timer = ctypes.c_void_p()
    if libc.timer_create(1, event, ctypes.byref(timer)) != 0:
        said = os.strerror(ctypes.get_errno())
        break
    libc.timer_settime(timer, 0, struct.pack("<qqqq", 0, period, 0, period), None)
print("armed", said, flush=True)
end = time.monotonic() + 1.5
while time.monotonic() < end:
    print(time.monotonic(), flush=True)
    time.sleep(0.002)
"""


RACER = r"""
import os, signal, time
h = os.fork()
if h == 0:  # H: prints the clock
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        print(time.monotonic(), flush=True)
        time.sleep(0.002)
    os._exit(0)
time.sleep(0.05)
b = os.fork()
if b == 0:  # B, made after H: sends H SIGCONT, over and over
    try:
        os.kill(h, signal.SIGCONT)
        print("armed ok", flush=True)
    except OSError as error:
        print("armed", error.strerror, flush=True)
    while True:
        try:
            os.kill(h, signal.SIGCONT)
        except OSError:
            time.sleep(0.001)
os.waitpid(h, 0)
os.kill(b, signal.SIGKILL)
"""


def _ran_while_stopped(command: list[str], pass_fds=()) -> tuple[str, int]:
    """Start ``command`` (WAKER or RACER in a sandbox), stop its processes for 0.4 s once it
    runs, then let them go: (what its arming said, how many times it printed the clock
    while stopped). The stop is as a halt's, one process after another in the order they
    were made (a halt's kill(-1) goes down the kernel's list of tasks), and slower: 10 ms
    from each to the next."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, pass_fds=pass_fds)
    lines = []
    while not lines or not lines[-1].startswith("armed"):
        lines.append(process.stdout.readline())
    armed = lines.pop().split(" ", 1)[1].strip()
    time.sleep(0.2)
    for pid in sorted(descendants(process.pid)):
        os.kill(pid, signal.SIGSTOP)
        time.sleep(0.01)
    stopped = time.monotonic() + 0.05  # (a stop takes a moment; a print may be in flight)
    time.sleep(0.4)
    woken = time.monotonic()
    signal_tree(process.pid, signal.SIGCONT)
    out, _ = process.communicate(timeout=30)
    stamps = [float(line) for line in [*lines, *out.splitlines()]]
    return armed, sum(stopped < t < woken for t in stamps)


@pytest.mark.parametrize("script", ["WAKER", "RACER"])
def test_a_stopped_worker_runs_on_only_without_the_filter(tmp_path, script):
    """WAKER's timers of its own, or RACER's later process that sends SIGCONT to an earlier
    one the stop has reached, keep a stopped process running, unless the filter refuses
    them."""
    ok, why = probe(bwrap_path())
    if not ok:
        pytest.skip(why)
    sandbox = Sandbox(bwrap_path(), secrets=[])
    python = [sys.executable, "-c", globals()[script]]
    unfiltered = [sandbox.bwrap, *sandbox.arguments(tmp_path, cuda=False), "--", *python]
    for _ in range(3):  # (a stop that finds all three timers' signals pending ends them)
        armed, printed = _ran_while_stopped(unfiltered)
        if printed:
            break
    assert armed == "ok" and printed > 20, (armed, printed)  # it ran on, stopped
    with opened_program() as syscalls:
        filtered = sandbox.command(tmp_path, False, python, syscalls)
        armed, printed = _ran_while_stopped(filtered, [syscalls])
    assert (armed, printed) == (REFUSED, 0)


NICE_SCRIPT = r"""
import os
try:
    os.setpriority(os.PRIO_PROCESS, 0, -5)
    print("nice", os.getpriority(os.PRIO_PROCESS, 0))
except OSError as error:
    print("nice", error.strerror)
try:
    with open("/proc/self/autogroup", "w") as group:
        group.write("-5")
    print("autogroup", open("/proc/self/autogroup").read().split()[-1])
except OSError as error:
    print("autogroup", error.strerror)
"""


def _can_raise_nice() -> bool:
    try:
        subprocess.run(
            [sys.executable, "-c", "import resource as r; r.setrlimit(r.RLIMIT_NICE, (40, 40))"],
            check=True,
            capture_output=True,
        )
        return True
    except subprocess.CalledProcessError:
        return False


def test_a_workers_limits_hold_its_priority_to_the_default():
    values = limits(1 << 40, 0)
    assert [values[k] for k in NICE_LIMITS] == [0, 0]


@pytest.mark.skipif(not _can_raise_nice(), reason="raising RLIMIT_NICE takes CAP_SYS_RESOURCE")
def test_a_worker_gets_no_priority_above_the_default_whatever_the_hosts_limit(tmp_path):
    values = {k: v for k, v in limits(1 << 40, 0).items() if k in NICE_LIMITS}

    def generous_host(ours: bool):
        def before_exec():
            resource.setrlimit(resource.RLIMIT_NICE, (40, 40))  # nice down to -20 allowed
            if ours:
                apply_limits(values)

        return before_exec

    seen = {ours: _sandboxed(tmp_path, NICE_SCRIPT, generous_host(ours)) for ours in (0, 1)}
    assert seen[0] == {"nice": "-5", "autogroup": "-5"}  # what the limits take away
    assert seen[1] == {"nice": "Permission denied", "autogroup": "Permission denied"}
