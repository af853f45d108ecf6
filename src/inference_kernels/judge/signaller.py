"""The signaller (``signals.py``): a small process that signals a worker's uid for the
referee. Run by file (``python -I -S signaller.py``), it imports nothing of the judge, so it
stays small and its forks are cheap. One line in per request ("UID SIGNUM"), one line out
(the exit code of the child that signalled)."""

import os
import sys


def signal_as(uid: int, signum: int) -> int:
    """Fork a child that becomes ``uid`` and calls kill(-1, signum); its exit code. The child
    first leaves for a session of its own: a SIGCONT reaches any process of the sender's
    session whatever its uid, and in the referee's session it woke processes others had
    stopped (a test's stopped process, woken by the per-sample thaw of a worker beside it)."""
    child = os.fork()
    if child == 0:
        code = 1
        try:
            os.setsid()
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signum)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status)


def main() -> None:
    read, write = sys.stdin.buffer, sys.stdout.buffer
    for line in iter(read.readline, b""):
        uid, signum = (int(x) for x in line.split())
        write.write(b"%d\n" % signal_as(uid, signum))
        write.flush()


if __name__ == "__main__":
    main()
