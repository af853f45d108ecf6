"""The system calls a worker is refused: a seccomp filter that bwrap installs (``--seccomp``)
right before it starts the worker, inherited by every process of the worker's and never
lifted. Two things it keeps:

**One share of the CPU.** Refused with EPERM: ``setsid`` (a new session is a new scheduler
autogroup, which the kernel weighs as much as the referee's or any other session: a
candidate's 32 helpers in 32 sessions took the two cores of a busy machine and passed at
55 us a call where the honest calls took 335; CI of record at 3bf6261), and
``sched_setattr``, ``sched_setscheduler``, ``sched_setparam`` (a policy or a scheduler
slice of its own: an unprivileged process may ask for a shorter slice and preempt sooner).

**A halted worker stays halted.** The referee stops every process of a worker (SIGSTOP)
while it writes a sample's inputs and reads its outputs; only a SIGCONT (or a tracer)
resumes one. No process of the worker may send SIGCONT (``kill``, ``tkill``, ``tgkill``,
``rt_sigqueueinfo``, ``rt_tgsigqueueinfo``, ``pidfd_send_signal`` with SIGCONT refused):
``kill(-1, SIGSTOP)`` stops one process after another, and a process it had not reached yet
kept sending SIGCONT to one it had, which so ran through the halt and computed the next
sample's calls as the referee wrote their inputs (passed at 35.3 us a call where the calls
took 488.3; CPU, a helper's trial at 04e4581). No process may trace another (``ptrace``: a
tracer resumes its tracee). Nor may the kernel send SIGCONT on a worker's behalf, from what
it set up before: a POSIX timer (``timer_create``: timers that sent SIGCONT every 100 us
kept a "stopped" worker running while the referee wrote the sets, passed at 31.5 us a call
where the calls took 506.6; CPU, a helper's trial at f3864cf), a message queue's
notification (``mq_notify``), an I/O signal (``fcntl`` ``F_SETSIG``), a parent's death
(``prctl`` ``PR_SET_PDEATHSIG`` SIGCONT), a child's end (``clone`` with SIGCONT as its exit
signal; ``clone3``, whose arguments a filter cannot read, answers ENOSYS, and C libraries
then use ``clone``): refused, each with EPERM. And a process group left orphaned with
stopped members, which the kernel sends SIGHUP, then SIGCONT, as the exit of its last
member with a parent in another group of the session leaves it so (a parent slow to exit,
its address space large, could end after a halt began): every process of the worker stays
in the group bwrap made, ``setpgid`` answers that it is done and does nothing (ninja starts
each command with ``setpgid(0, 0)`` and stops at a refusal), so that no group of the
worker's is ever orphaned by an exit. ``io_uring``, whose operations no filter sees, is
refused whole.

And every call of another ABI than the host's own (the 32-bit ``int 0x80`` entry and x32 on
x86_64): the same calls under other numbers.

The program is classic BPF, written out here (its constants from ``linux/seccomp.h``,
``linux/filter.h`` and ``linux/audit.h``) rather than through libseccomp, whose shared
library the lent GPU machines need not have.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import signal
import struct
from collections.abc import Iterator

# sock_filter opcodes
LOAD = 0x20  # BPF_LD | BPF_W | BPF_ABS: the word at offset k of struct seccomp_data
AND = 0x54  # BPF_ALU | BPF_AND | BPF_K
EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
AT_LEAST = 0x35  # BPF_JMP | BPF_JGE | BPF_K
RETURN = 0x06  # BPF_RET | BPF_K
NR, ARCH = 0, 4  # offsets in struct seccomp_data: the call's number, its ABI
ARG = (16, 24, 32)  # the low 32 bits of its first three arguments (little-endian)
ALLOW = 0x7FFF_0000  # SECCOMP_RET_ALLOW
REFUSE = 0x0005_0000 | 1  # SECCOMP_RET_ERRNO | EPERM
NO_SUCH_CALL = 0x0005_0000 | 38  # SECCOMP_RET_ERRNO | ENOSYS
PRETENDED = 0x0005_0000  # SECCOMP_RET_ERRNO | 0: "done", and nothing done (setpgid)
X32_BIT = 0x4000_0000  # __X32_SYSCALL_BIT
F_SETSIG, PR_SET_PDEATHSIG, EXIT_SIGNAL = 10, 1, 0xFF  # (clone's exit signal: flags & 0xff)

# Refused whatever their arguments (EPERM)
REFUSED = (
    "setsid",
    "sched_setattr",
    "sched_setscheduler",
    "sched_setparam",
    "timer_create",
    "mq_notify",
    "ptrace",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
)
# Refused with SIGCONT as the signal they send, which is their second or third argument
SENDERS = {
    "kill": 1,
    "tkill": 1,
    "tgkill": 2,
    "rt_sigqueueinfo": 1,
    "rt_tgsigqueueinfo": 2,
    "pidfd_send_signal": 1,
}
# Each ABI this filter knows: its audit architecture, whether it has x32 numbers beside its
# own, and its calls' numbers (the kernel's unistd tables)
HOSTS = {
    "x86_64": (
        0xC000_003E,
        True,
        {
            "setsid": 112,
            "sched_setattr": 314,
            "sched_setscheduler": 144,
            "sched_setparam": 142,
            "timer_create": 222,
            "mq_notify": 244,
            "ptrace": 101,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "kill": 62,
            "tkill": 200,
            "tgkill": 234,
            "rt_sigqueueinfo": 129,
            "rt_tgsigqueueinfo": 297,
            "pidfd_send_signal": 424,
            "setpgid": 109,
            "clone3": 435,
            "clone": 56,
            "fcntl": 72,
            "prctl": 157,
        },
    ),
    "aarch64": (
        0xC000_00B7,
        False,
        {
            "setsid": 157,
            "sched_setattr": 274,
            "sched_setscheduler": 119,
            "sched_setparam": 118,
            "timer_create": 107,
            "mq_notify": 184,
            "ptrace": 117,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "kill": 129,
            "tkill": 130,
            "tgkill": 131,
            "rt_sigqueueinfo": 138,
            "rt_tgsigqueueinfo": 240,
            "pidfd_send_signal": 424,
            "setpgid": 154,
            "clone3": 435,
            "clone": 220,
            "fcntl": 25,
            "prctl": 167,
        },
    ),
}


class FilterUnavailable(RuntimeError):
    """No filter for this host's architecture."""


def _instruction(code: int, k: int, yes: int = 0, no: int = 0) -> bytes:
    return struct.pack("<HBBI", code, yes, no, k)


class _Program:
    """Instructions with jumps to labels, resolved when the program is written out (a
    classic BPF jump is forward, by at most 255 instructions)."""

    def __init__(self) -> None:
        self.code: list[tuple] = []
        self.labels: dict[str, int] = {}

    def add(self, code: int, k: int = 0, yes: str | None = None, no: str | None = None):
        self.code.append((code, k, yes, no))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def bytes(self) -> bytes:
        def offset(at: int, label: str | None) -> int:
            return 0 if label is None else self.labels[label] - at - 1

        return b"".join(
            _instruction(code, k, offset(at, yes), offset(at, no))
            for at, (code, k, yes, no) in enumerate(self.code)
        )


@functools.cache
def program(machine: str | None = None) -> bytes:
    """The filter for ``machine`` (this host's by default), as bwrap reads it."""
    machine = machine or platform.machine()
    if machine not in HOSTS:
        raise FilterUnavailable(
            f"the worker's system-call filter knows {' and '.join(HOSTS)}, not {machine}"
        )
    arch, x32, number = HOSTS[machine]
    cont = int(signal.SIGCONT)
    p = _Program()
    p.add(LOAD, ARCH)
    p.add(EQUAL, arch, no="refuse")  # another ABI: refused, whatever the call
    p.add(LOAD, NR)
    if x32:
        p.add(AT_LEAST, X32_BIT, yes="refuse")
    for name in REFUSED:
        p.add(EQUAL, number[name], yes="refuse")
    for name, argument in SENDERS.items():
        p.add(EQUAL, number[name], yes=f"signal{argument}")
    p.add(EQUAL, number["setpgid"], yes="pretend")
    p.add(EQUAL, number["clone3"], yes="no_such_call")
    p.add(EQUAL, number["clone"], yes="clone")
    p.add(EQUAL, number["fcntl"], yes="fcntl")
    p.add(EQUAL, number["prctl"], yes="prctl")
    p.add(RETURN, ALLOW)
    for argument in sorted(set(SENDERS.values())):
        p.label(f"signal{argument}")  # kill(pid, sig), tgkill(tgid, tid, sig), ...
        p.add(LOAD, ARG[argument])
        p.add(EQUAL, cont, yes="refuse", no="allow")
    p.label("clone")  # clone(flags, ...): the exit signal is flags' low byte
    p.add(LOAD, ARG[0])
    p.add(AND, EXIT_SIGNAL)
    p.add(EQUAL, cont, yes="refuse", no="allow")
    p.label("fcntl")  # fcntl(fd, cmd, ...)
    p.add(LOAD, ARG[1])
    p.add(EQUAL, F_SETSIG, yes="refuse", no="allow")
    p.label("prctl")  # prctl(option, arg2, ...): the kernel refuses a signal past 64 itself
    p.add(LOAD, ARG[0])
    p.add(EQUAL, PR_SET_PDEATHSIG, no="allow")
    p.add(LOAD, ARG[1])
    p.add(EQUAL, cont, yes="refuse")
    p.label("allow")
    p.add(RETURN, ALLOW)
    p.label("refuse")
    p.add(RETURN, REFUSE)
    p.label("no_such_call")
    p.add(RETURN, NO_SUCH_CALL)
    p.label("pretend")
    p.add(RETURN, PRETENDED)
    return p.bytes()


@contextlib.contextmanager
def opened_program() -> Iterator[int]:
    """A file descriptor (at offset 0) that holds ``program()``, closed on leaving: for
    bwrap's ``--seccomp FD`` (pass it to bwrap's process, which reads it to the end: one
    descriptor a sandbox)."""
    descriptor = os.memfd_create("worker-syscall-filter", 0)
    try:
        os.write(descriptor, program())
        os.lseek(descriptor, 0, os.SEEK_SET)
        yield descriptor
    finally:
        os.close(descriptor)
