"""A worker's share of the CPU is its one session's, at the default priority: the system-
call filter (judge/syscall_filter.py), its program run by an interpreter of classic BPF
written here and the calls it refuses inside a real sandbox, and the priority limits
(sandbox.limits)."""

import os
import platform
import resource
import struct
import subprocess
import sys

import pytest

from inference_kernels.judge.sandbox import Sandbox, apply_limits, bwrap_path, limits, probe
from inference_kernels.judge.syscall_filter import (
    ALLOW,
    HOSTS,
    REFUSE,
    FilterUnavailable,
    open_program,
    program,
)

X86_64, I386, AARCH64 = 0xC000003E, 0x40000003, 0xC00000B7
NICE_LIMITS = (resource.RLIMIT_NICE, resource.RLIMIT_RTPRIO)


def _run(code: bytes, nr: int, arch: int) -> int:
    """What the filter returns for call ``nr`` of ABI ``arch`` (the opcodes it uses)."""
    data = struct.pack("<iI", nr, arch) + bytes(56)  # struct seccomp_data
    instructions = [struct.unpack("<HBBI", code[i : i + 8]) for i in range(0, len(code), 8)]
    a, pc = 0, 0
    while True:
        op, yes, no, k = instructions[pc]
        if op == 0x20:
            a = struct.unpack_from("<I", data, k)[0]
        elif op in (0x15, 0x35):
            taken = a == k if op == 0x15 else a >= k
            pc += yes if taken else no
        elif op == 0x06:
            return k
        else:
            raise AssertionError(f"opcode {op:#x}")
        pc += 1


@pytest.mark.parametrize(
    ("machine", "arch", "refused", "allowed"),
    [
        # setsid, sched_setattr, sched_setscheduler, sched_setparam | read, clone, getpid
        ("x86_64", X86_64, [112, 314, 144, 142], [0, 56, 39, 111, 113, 143, 315]),
        ("aarch64", AARCH64, [157, 274, 119, 118], [63, 220, 172, 156, 158]),
    ],
)
def test_the_program_refuses_exactly_the_named_calls(machine, arch, refused, allowed):
    code = program(machine)
    assert [_run(code, nr, arch) for nr in refused] == [REFUSE] * 4
    assert [_run(code, nr, arch) for nr in allowed] == [ALLOW] * len(allowed)


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
import ctypes, os, struct, subprocess
libc = ctypes.CDLL(None, use_errno=True)
def call(*args):
    result = libc.syscall(*args)
    return "ok" if result >= 0 else os.strerror(ctypes.get_errno())
attr = struct.pack("<IIQiIQQQII", 56, 0, 0, 0, 0, 100000, 0, 0, 0, 1024)  # a 0.1 ms slice
slice_ = ctypes.create_string_buffer(attr)
param = ctypes.create_string_buffer(struct.pack("<i", 0))
print("setsid", call(112))
print("sched_setattr", call(314, 0, slice_, 0))
print("sched_setscheduler", call(144, 0, 0, param))
print("sched_setparam", call(142, 0, param))
print("x32_getpid", call(0x40000000 | 39))
print("getpid", call(39))
print("child", subprocess.run(["echo", "runs"], capture_output=True, text=True).stdout.strip())
try:
    subprocess.run(["true"], start_new_session=True)
    print("new_session ok")
except OSError as error:
    print("new_session", error.strerror)
"""


def _sandboxed(folder, script: str, before_exec=None) -> dict[str, str]:
    """What ``script`` prints (a word, then what it saw) run by Python in a sandbox under
    the worker's filter; skips where no sandbox can be made."""
    ok, why = probe(bwrap_path())
    if not ok:
        pytest.skip(why)
    syscalls = open_program()
    try:
        command = Sandbox(bwrap_path(), secrets=[]).command(
            folder, False, [sys.executable, "-c", script], syscalls
        )
        done = subprocess.run(
            command, capture_output=True, text=True, pass_fds=[syscalls], preexec_fn=before_exec
        )
    finally:
        os.close(syscalls)
    assert done.returncode == 0, done.stderr
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the script's call numbers")
def test_a_sandboxed_process_is_refused_those_calls_and_nothing_else(tmp_path):
    lines = _sandboxed(tmp_path, SCRIPT)
    assert lines == {
        "setsid": "Operation not permitted",
        "sched_setattr": "Operation not permitted",
        "sched_setscheduler": "Operation not permitted",
        "sched_setparam": "Operation not permitted",
        "x32_getpid": "Operation not permitted",
        "getpid": "ok",
        "child": "runs",
        "new_session": "Operation not permitted",
    }
    # outside the sandbox, the same calls are the host's to make
    outside = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True)
    assert "sched_setparam ok" in outside.stdout and "x32_getpid" in outside.stdout


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
