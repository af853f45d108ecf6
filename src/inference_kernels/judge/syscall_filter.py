"""The system calls a worker is refused: a seccomp filter that bwrap installs (``--seccomp``)
right before it starts the worker, inherited by every process of the worker's and never
lifted.

Refused with EPERM:

- ``setsid``: a new session is a new scheduler autogroup, which the kernel gives as large
  a share of the CPU as the referee's or any other session's. A worker is one session
  (``bwrap --new-session``): a candidate's 32 helpers in 32 sessions of their own took
  the two cores of a busy machine from everything else and computed a sample's calls in
  parallel, passed at 55 us a call where the honest solution's took 335 (CPU, CI of record
  at 3bf6261, tests/exploits/attacks/starve_referee.py);
- ``sched_setattr``, ``sched_setscheduler``, ``sched_setparam``: a policy or a scheduler
  slice of its own (an unprivileged process may ask for a shorter slice, and preempt
  sooner after a wake);
- every call of another ABI than the host's own (the 32-bit ``int 0x80`` entry and x32 on
  x86_64): the same calls under other numbers.

The program is classic BPF, written out here (a handful of instructions, with the kernel's
constants from ``linux/seccomp.h``, ``linux/filter.h`` and ``linux/audit.h``) rather than
through libseccomp, whose shared library the lent GPU machines need not have.
"""

from __future__ import annotations

import functools
import os
import platform
import struct

# sock_filter opcodes
LOAD = 0x20  # BPF_LD | BPF_W | BPF_ABS: the word at offset k of struct seccomp_data
EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
AT_LEAST = 0x35  # BPF_JMP | BPF_JGE | BPF_K
RETURN = 0x06  # BPF_RET | BPF_K
NR, ARCH = 0, 4  # offsets in struct seccomp_data
ALLOW = 0x7FFF_0000  # SECCOMP_RET_ALLOW
REFUSE = 0x0005_0000 | 1  # SECCOMP_RET_ERRNO | EPERM
X32_BIT = 0x4000_0000  # __X32_SYSCALL_BIT

REFUSED = ("setsid", "sched_setattr", "sched_setscheduler", "sched_setparam")
# (the audit architecture, the call numbers of REFUSED in its table, whether x32 exists)
HOSTS = {
    "x86_64": (0xC000_003E, (112, 314, 144, 142), True),
    "aarch64": (0xC000_00B7, (157, 274, 119, 118), False),
}


class FilterUnavailable(RuntimeError):
    """No filter for this host's architecture."""


def _instruction(code: int, k: int, yes: int = 0, no: int = 0) -> bytes:
    return struct.pack("<HBBI", code, yes, no, k)


@functools.cache
def program(machine: str | None = None) -> bytes:
    """The filter for ``machine`` (this host's by default), as bwrap reads it."""
    machine = machine or platform.machine()
    if machine not in HOSTS:
        raise FilterUnavailable(
            f"the worker's system-call filter knows {' and '.join(HOSTS)}, not {machine}"
        )
    arch, numbers, x32 = HOSTS[machine]
    checks = [(AT_LEAST, X32_BIT)] * x32 + [(EQUAL, n) for n in numbers]
    code = [
        _instruction(LOAD, ARCH),
        _instruction(EQUAL, arch, yes=1),  # another ABI: refused, whatever the call
        _instruction(RETURN, REFUSE),
        _instruction(LOAD, NR),
    ]
    refuse = len(code) + len(checks) + 1  # the last instruction's index, after ALLOW's
    for opcode, value in checks:
        code.append(_instruction(opcode, value, yes=refuse - len(code) - 1))
    code += [_instruction(RETURN, ALLOW), _instruction(RETURN, REFUSE)]
    return b"".join(code)


def open_program() -> int:
    """A file descriptor (at offset 0, inheritable) that holds ``program()``: for bwrap's
    ``--seccomp FD``, which reads it and closes it. The caller closes its own copy."""
    descriptor = os.memfd_create("worker-syscall-filter", 0)
    os.write(descriptor, program())
    os.lseek(descriptor, 0, os.SEEK_SET)
    return descriptor
