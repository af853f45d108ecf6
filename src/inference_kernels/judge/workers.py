"""The referee's side of one worker: start it (in the sandbox), ask it, stop it.

``WorkerHandle.ask`` sends one message and returns the worker's answer, validated
(``protocol.parse``). Every way a case can end in the worker comes out as ``CaseEnded``
with its status: a reported failure (``failed``), no answer before the deadline
(``timeout``), a dead process (``crashed``, with how it died and the end of its log), a
message outside the protocol (``protocol_violation``). After anything but a reported
failure the worker is stopped, since nothing it says can be trusted any more.

A worker's output goes through a pipe to its log file, at most LOG_BYTES of it, so a
solution cannot fill the judge's disk.

A compiled (cpp/cuda) solution is built by its worker, in its sandbox, into the folder of
its build key under ``builds`` (``claim_build``): a folder that holds a complete build (a
digest of its extension, written here once a worker loaded it, still matches) is shown
read-only and loaded as it is; any other is emptied and shown writable to this worker
alone. A lock per key, held until the worker has loaded, keeps two referees from building
the same key at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import shutil
import signal
import stat as filemode
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import statuses
from ..dtypes import TORCH_DTYPES
from ..schema import Definition, Solution
from . import cuda_ipc, protocol
from .channel import Channel, ChannelClosed, ChannelTimeout, ProtocolError, close_fds, pair
from .gpu_nodes import gpu_of, nodes_for
from .loader import (
    Build,
    SolutionLoadError,
    build_key,
    compiled,
    extension_name,
    usable,
    write_package,
)
from .sandbox import Sandbox, apply_limits, identity, limits
from .shared import Inbox, SharedBuffer, Slice, TransportError, aligned
from .signals import belongs, running, signal_tree, signal_uid, stop_uid, wake_uid
from .stopwatch import Stopwatch
from .syscall_filter import opened_program

LOG_BYTES = 8 << 20


class CaseEnded(Exception):
    """The case ends here with ``status`` (a failure) and a one-line ``error``."""

    def __init__(self, status: str, error: str):
        super().__init__(error)
        self.status, self.error = status, error


def _drain(pipe, log: Path) -> None:
    written = 0
    with pipe, log.open("ab") as stream:
        for chunk in iter(lambda: pipe.read1(1 << 16), b""):
            if written < LOG_BYTES:
                stream.write(chunk[: LOG_BYTES - written])
                stream.flush()
                written += len(chunk)
                if written >= LOG_BYTES:
                    # flushed now: the referee may exit (and this daemon thread with it)
                    # before the pipe closes and the file with it (the CI once lost it)
                    stream.write(b"\n[inference-kernels: log cut at the size limit]\n")
                    stream.flush()


def _log_tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:] if line.strip())[:800]


def _library_digest(library: Path) -> str | None:
    """The sha256 of a built extension (a plain file, never through a link), or None."""
    try:
        fd = os.open(library, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as stream:
        if not filemode.S_ISREG(os.fstat(fd).st_mode):
            return None
        return hashlib.file_digest(stream, "sha256").hexdigest()


def _seal(folder: Path, name: str) -> str | None:
    """Make a new complete build the referee's and read-only (the folder 0755, the
    extension 0644: a later worker, of another uid, reads it; the one that built it can
    no longer change it, under root); return the extension's digest (None: no plain file
    to seal). Only descriptors are used: the worker may still be running."""
    try:
        top = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if os.geteuid() == 0:
            os.fchown(top, os.geteuid(), os.getegid())
        os.fchmod(top, 0o755)
        try:
            fd = os.open(f"{name}.so", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=top)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as stream:
            status = os.fstat(fd)
            if not filemode.S_ISREG(status.st_mode) or status.st_nlink != 1:
                return None
            if os.geteuid() == 0:
                os.fchown(fd, os.geteuid(), os.getegid())
            os.fchmod(fd, 0o644)
            return hashlib.file_digest(stream, "sha256").hexdigest()
    finally:
        os.close(top)


def _empty(folder: Path) -> None:
    """Remove ``folder``: moved aside first (what resists removal stays there, aside)."""
    if not folder.exists() and not folder.is_symlink():
        return
    aside = folder.with_name(f"{folder.name}.old-{secrets.token_hex(6)}")
    os.rename(folder, aside)
    shutil.rmtree(aside, ignore_errors=True)


@dataclass
class BuildClaim:
    """A compiled solution's build folder, claimed (locked) until its worker has loaded."""

    build: Build
    marker: Path
    lock: int

    def finish(self, loaded: bool) -> None:
        """Seal a new build and record it complete when the worker loaded it; release the
        lock."""
        try:
            if loaded and not self.build.cached:
                digest = _seal(self.build.folder, self.build.name)
                if digest is not None:
                    self.marker.write_text(digest)
        finally:
            os.close(self.lock)


def claim_build(solution: Solution, builds: Path, device: str, uid: int | None) -> BuildClaim:
    """The build folder of ``solution``'s key under ``builds``: complete (cached), or empty
    and owned by ``uid`` (the worker's, under root) for a new build."""
    key = build_key(solution, device)
    builds.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock = os.open(builds / f"{key}.lock", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        folder, name, marker = builds / key, extension_name(key), builds / f"{key}.done"
        if marker.is_file() and folder.is_dir() and not folder.is_symlink():
            digest = _library_digest(folder / f"{name}.so")
            if digest is not None and digest == marker.read_text().strip():
                return BuildClaim(Build(folder, name, cached=True), marker, lock)
        marker.unlink(missing_ok=True)
        _empty(folder)
        folder.mkdir(mode=0o700)
        if uid is not None and os.geteuid() == 0:
            os.chown(folder, uid, uid)
        return BuildClaim(Build(folder, name, cached=False), marker, lock)
    except BaseException:
        os.close(lock)
        raise


@dataclass
class WorkerHandle:
    solution: Solution
    process: subprocess.Popen
    channel: Channel
    log: Path
    sandboxed: bool
    timeout: float
    inbox: Inbox
    names: list[str] = field(default_factory=list)  # the definition's outputs
    loaded: protocol.Loaded | None = None
    # Arenas this worker has been shown: freed only once it is dead (a live worker that
    # kept a mapping could otherwise write into memory the referee reuses), and lent again,
    # in slices, to its later cases (``lend``), so that they do not pile up case after case.
    pool: list[SharedBuffer] = field(default_factory=list)
    lent: dict[int, int] = field(default_factory=dict)  # id of an arena -> bytes lent this case
    arena_bytes: int = 0  # the size of its first arena (the referee's sets budget)
    drain: threading.Thread | None = None
    frozen: bool = False
    settled: bool = False  # back waiting since its last answer (``catch_up``)
    uid: int | None = None  # the worker's own uid (under root): signals reach all of it
    init: dict[str, Any] = field(default_factory=dict)  # what it is told first (initialize)
    claim: BuildClaim | None = None  # a compiled solution's build, until it has loaded

    def __post_init__(self) -> None:
        if self.channel is not None:  # (tests make handles without one)
            self.channel.compact = True  # it reads a worker's messages (channel.MAX_WHITESPACE)

    @classmethod
    def start(cls, *args: Any, **kwargs: Any) -> WorkerHandle:
        """Start a worker (``spawn``'s arguments) and wait until it has loaded its solution
        (or failed to)."""
        return cls.spawn(*args, **kwargs).initialize()

    @classmethod
    def spawn(
        cls,
        solution: Solution,
        definition: Definition,
        device: torch.device,
        sandbox: Sandbox | None,
        folder: Path,
        timeout: float,
        lane: str,
        builds: Path | None = None,
    ) -> WorkerHandle:
        """The worker's process, started up to where it waits to be told its case (its
        interpreter, torch and the judge's modules: seconds), before any solution code is
        loaded: ``initialize`` then loads it. Its log is named for ``lane``, the referee's.
        A compiled solution's build is claimed here (or its complete build found) under
        ``builds`` (default ``folder/builds``)."""
        usable(solution, definition)
        uid = identity() if sandbox is not None else None
        claim = None
        if compiled(solution):
            claim = claim_build(solution, builds or folder / "builds", str(device), uid)
        try:
            handle = cls._start(
                solution, definition, device, sandbox, folder, timeout, lane, uid, claim
            )
            handle.claim = claim
        except BaseException:
            if claim is not None:
                claim.finish(loaded=False)
            raise
        return handle

    def initialize(self) -> WorkerHandle:
        """Tell a spawned worker its case and wait until it has loaded its solution (or
        failed to)."""
        try:
            self.loaded = self.ask(self.init, [], protocol.Loaded)
        except CaseEnded as ended:
            self.loaded = protocol.Loaded(op="loaded", ok=False, error=ended.error)
        finally:
            if self.claim is not None:
                self.claim.finish(loaded=self.loaded is not None and self.loaded.ok)
                self.claim = None
        return self

    def made_for(self, solution: Solution, definition: Definition) -> bool:
        """Whether this spawned worker was made for this solution of this definition."""
        return (
            self.init.get("solution") == solution.model_dump_json()
            and self.init.get("definition") == definition.model_dump_json()
        )

    @classmethod
    def _start(
        cls,
        solution: Solution,
        definition: Definition,
        device: torch.device,
        sandbox: Sandbox | None,
        folder: Path,
        timeout: float,
        lane: str,
        uid: int | None,
        claim: BuildClaim | None,
    ) -> WorkerHandle:
        gpu = None
        if sandbox is not None and device.type == "cuda":
            gpu = gpu_of(str(device))
            nodes_for(gpu)  # GpuNotIsolated before anything is written or started
        key = hashlib.sha256(solution.name.encode()).hexdigest()[:10]
        log = folder / "logs" / f"{lane.replace(':', '')}-worker-{key}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        (folder / "packages").mkdir(parents=True, exist_ok=True)
        package = write_package(
            solution, Path(tempfile.mkdtemp(prefix=f"{key}-", dir=folder / "packages")) / "p"
        )
        ours, theirs = pair()
        command = [sys.executable, "-s", "-B", "-m", "inference_kernels.judge.worker"]
        command += ["--fd", str(theirs.fileno())]
        values = {}
        inside = str(device)  # the worker's name for its device
        filtered = opened_program() if sandbox is not None else contextlib.nullcontext()
        with theirs, filtered as syscalls:  # (each closed once bwrap has its copy)
            if sandbox is not None:
                build = None if claim is None else claim.build
                command = sandbox.worker_command(
                    package,
                    device.type == "cuda",
                    command,
                    uid,
                    syscalls,
                    build=None if build is None else build.folder,
                    writable=build is not None and not build.cached,
                    gpu=gpu,
                )
                values = limits(sandbox.memory, uid)
                if gpu is not None:  # the one GPU its sandbox shows (gpu_nodes.py)
                    inside = "cuda:0"
            process = subprocess.Popen(
                command,
                pass_fds=[theirs.fileno(), *([] if syscalls is None else [syscalls])],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=(lambda: apply_limits(values)) if values else None,
            )
        handle = cls(
            solution,
            process,
            Channel(ours),
            log,
            sandbox is not None,
            timeout,
            Inbox(device),
            list(definition.outputs),
            uid=uid if os.geteuid() == 0 else None,
        )
        handle.drain = threading.Thread(target=_drain, args=(process.stdout, log), daemon=True)
        handle.drain.start()
        handle.init = {
            "op": "init",
            "device": inside,
            "definition": definition.model_dump_json(),
            "solution": solution.model_dump_json(),
            "package": str(package),
            "build": None if claim is None else claim.build.to_dict(),
        }
        return handle

    # ------------------------------------------------------------------ talking

    def alive(self) -> bool:
        return self.process.poll() is None

    def _death(self) -> str:
        try:
            code = self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        signum = -code if code < 0 else code - 128 if self.sandboxed and code > 128 else 0
        if signum > 0:
            try:
                how = f"killed by {signal.Signals(signum).name}"
            except ValueError:
                how = f"killed by signal {signum}"
        else:
            how = f"exited with code {code}"
        if self.drain is not None:
            self.drain.join(timeout=5)
        tail = _log_tail(self.log)
        return f"process {how}" + (f"; log: {tail}" if tail else "")

    def ask(
        self,
        message: dict[str, Any],
        fds: list[int],
        *expected: type,
        timeout: float | None = None,
    ) -> Any:
        """Send ``message`` (with descriptors) and return the answer as one of ``expected``;
        raise CaseEnded otherwise. Buffers the answer announces are mapped here. A halted
        worker is woken first; a sample's ("go") worker is halted as its answer arrives,
        before any of it is read (``halt``)."""
        seconds = self.timeout if timeout is None else timeout
        received: list[int] = []
        arrival = self.halt if message.get("op") == "go" else None
        self.settled = False
        try:
            self.thaw()
            self.channel.send(message, fds, timeout=seconds)
            answer, received = self.channel.recv(time.monotonic() + seconds, arrival)
            parsed = protocol.parse(answer, *expected)
            if isinstance(parsed, (protocol.Checked, protocol.Sample, protocol.Ready)):
                self.inbox.announce([b.model_dump() for b in parsed.buffers], received)
        except ChannelTimeout:
            self.stop()
            raise CaseEnded(statuses.TIMEOUT, f"no answer within {seconds:.0f} s") from None
        except (ChannelClosed, OSError):
            self.stop(kill=False)
            raise CaseEnded(statuses.CRASHED, self._death()) from None
        except (ProtocolError, protocol.Violation, TransportError) as error:
            self.stop()
            raise CaseEnded(
                statuses.PROTOCOL_VIOLATION, f"the worker sent a message the judge refuses: {error}"
            ) from None
        finally:
            close_fds(received)
        if isinstance(parsed, protocol.Failed):
            raise CaseEnded(parsed.status, parsed.error)
        return parsed

    def read(self, refs, expected: list[torch.Tensor]) -> list[torch.Tensor]:
        """Private copies of the tensors a message named, where they have the expected
        shape and dtype; where they have not, an empty (meta) tensor of what was claimed,
        which the comparison refuses without anything being read (a claimed shape of 2^40
        elements at stride 0 fits any buffer). A bad reference ends the case."""
        try:
            copies = []
            for ref, wanted in zip(refs, expected, strict=True):
                claimed = TORCH_DTYPES[ref.dtype]
                if list(ref.shape) != list(wanted.shape) or claimed != wanted.dtype:
                    copies.append(torch.empty(ref.shape, dtype=claimed, device="meta"))
                else:
                    copies.append(self.inbox.read([ref.model_dump()])[0])
            return copies
        except Exception as error:  # TransportError, or what torch says of a bad view
            self.stop()
            raise CaseEnded(
                statuses.PROTOCOL_VIOLATION, f"the worker sent outputs the judge refuses: {error}"
            ) from None

    def end_case(self, watch: Stopwatch | None = None) -> None:
        """Let the worker release the case's buffers (a worker that does not answer goes),
        then freeze it and everything it started until its next case: between its cases a
        solution runs nothing (no load on the GPU while another solution is timed). The
        freeze is ``watch``'s span ``freeze``, apart from the worker's own end."""
        self.inbox.close()
        if self.alive():
            try:
                self.ask({"op": "end"}, [], protocol.Ended, timeout=min(self.timeout, 60))
            except CaseEnded:
                pass
        with (watch or Stopwatch()).span("freeze"):
            if self.alive():
                self.halt()
                if self.uid is not None and not self._stopped():
                    self._signal(signal.SIGKILL)  # something would not stop: it all goes
        self.release()

    def _signal(self, signum: int) -> float | None:
        """With a uid of its own, the uid's signal reaches every process of the worker at
        once; a kill also goes down its process tree (the sandbox's own processes). A thaw
        does not: only the uid's processes are ever stopped. (Waking a worker took 58 ms a
        case in the H200 audit at ae23d6d, three scans of /proc among it; a wake by scan
        now scans once.) For a SIGCONT, the ``perf_counter`` at which the worker could
        first run again."""
        woken = None
        if self.uid is not None and signum == signal.SIGSTOP:
            stop_uid(self.uid)
        elif self.uid is not None and signum == signal.SIGCONT:
            woken = wake_uid(self.uid)
        elif self.uid is not None:
            signal_uid(self.uid, signum)
        if self.uid is None or signum == signal.SIGKILL:
            woken = signal_tree(self.process.pid, signum)
        return woken if signum == signal.SIGCONT else None

    def _stopped(self, seconds: float = 0.5) -> bool:
        """Has every process of the worker's uid stopped (a signal takes a moment)?"""
        deadline = time.monotonic() + seconds
        while running(self.uid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def owns(self, pid: int) -> bool:
        """Is ``pid`` one of this worker's processes?"""
        return belongs(pid, self.uid, self.process.pid)

    def halt(self) -> None:
        """Every process of the worker stopped (SIGSTOP, as between its cases, without the
        scan that checks it: a stop is not caught nor ignored) until ``thaw``, unless it is.
        A sample's worker is halted as its reply arrives (``ask``), before the referee reads
        the reply, so that the outputs it names are what it has computed by then, and stays
        halted until the referee has copied the checked call's outputs and compared the
        inputs (``Sampler``). (Running on, a thread of a solution's computed a sample's calls
        after the reply, while the referee parsed and mapped the thousands of buffers the
        reply announced: passed at 9.1 us a call, where the calls took 46-63; CPU, red team
        at 3cbba3c.)"""
        if not self.frozen and self.alive():
            self._signal(signal.SIGSTOP)
            self.frozen = True

    def catch_up(self) -> None:
        """Wake the worker and wait until it is back waiting for the referee: what it does
        after a reply (the collection it put off) is then done, not left for the next
        sample's time (CI at c95b1dd and ee7affe: a worker halted as its reply arrived and
        woken only for the next sample finished its collection in that sample, an honest
        eager baseline seen at 2,035-4,389 us a call where it took 371-479). Nothing to do
        when it has not answered anything since."""
        if not self.settled:
            self.ask({"op": "wake"}, [], protocol.Awake)
            self.settled = True

    def thaw(self) -> float | None:
        """Wake a halted worker: the ``perf_counter`` at which it could first run again
        (None when it was not halted)."""
        woken = None
        if self.frozen and self.alive():
            woken = self._signal(signal.SIGCONT)
        self.frozen = False
        return woken

    def lend(self, size: int, device: torch.device) -> Slice:
        """``size`` bytes for this case: the next free part of the arena with the least
        room that holds it, else of a new arena: the first of ``max(size, arena_bytes)``
        bytes, any later one of ``size`` (on CUDA, after torch's cache is emptied if memory
        is short)."""
        size = aligned(size)
        roomy = [a for a in self.pool if a.size - self.lent.get(id(a), 0) >= size]
        if roomy:
            arena = min(roomy, key=lambda a: a.size - self.lent.get(id(a), 0))
        else:
            try:
                first = self.arena_bytes if not self.pool else 0
                arena = SharedBuffer.create(max(size, first), device)
            except cuda_ipc.CudaIpcError:
                torch.cuda.empty_cache()
                arena = SharedBuffer.create(size, device)
            self.pool.append(arena)
        start = self.lent.get(id(arena), 0)
        self.lent[id(arena)] = start + size
        return Slice(arena, start, size)

    def take_back(self, parts: list) -> None:
        """Slices of this case that are no longer used (timing sets replaced by more): the
        top of their arena is lent again. A slice below the top stays lent to the case."""
        for part in sorted(parts, key=lambda p: p.start, reverse=True):
            if isinstance(part, Slice) and self.lent.get(id(part.arena)) == part.start + part.size:
                self.lent[id(part.arena)] = part.start

    def pooled(self, idle_only: bool = False) -> int:
        """Bytes in the pool (only those not lent in this case)."""
        return sum(a.size - (self.lent.get(id(a), 0) if idle_only else 0) for a in self.pool)

    def release(self) -> None:
        """The case is over: the arenas are idle, and freed if the worker is dead."""
        self.lent.clear()
        if not self.alive():
            for buffer in self.pool:
                buffer.release()
            self.pool = []

    def stop(self, kill: bool = True) -> None:
        if kill and self.uid is not None:
            signal_uid(self.uid, signal.SIGKILL)  # all of it, whatever it forked
        if self.alive():
            if kill:
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
                except OSError:
                    self.process.kill()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.channel.close()
        self.inbox.close()
        self.release()

    def exit(self) -> None:
        """Retire the worker: a frozen one is killed as it is (thawed, what it left running
        would run again before it dies)."""
        if self.frozen:
            self._signal(signal.SIGKILL)
        if self.alive():
            try:
                self.channel.send({"op": "exit"}, [], timeout=5)
                self.process.wait(timeout=5)
            except (ChannelClosed, ChannelTimeout, OSError, subprocess.TimeoutExpired):
                pass
        self.stop()


def start_or_fail(*args, **kwargs) -> WorkerHandle | str:
    """A started worker, or the one-line reason it cannot be used."""
    try:
        return WorkerHandle.start(*args, **kwargs)
    except SolutionLoadError as error:
        return str(error)
