"""What a solution's worker can see and do: a bubblewrap sandbox and resource limits.

Each worker runs under ``bwrap`` (Debian package ``bubblewrap``) in its own PID, IPC,
network and UTS namespaces (and a user namespace when the judge is not root), with:

- the whole file system read-only, and hidden from it (an empty tmpfs, or an empty file
  over a file): the judge's cache (reference outputs, other solutions' packages), the key
  that signs results, the dataset and its tensors (engine outputs among them), the report,
  the candidate files, ``/tmp``, ``/run``, home directories. What the worker needs from a
  hidden place (the Python installation, the judge's code, its own package) is bound back
  read-only;
- a private writable scratch ``/tmp`` of bounded size;
- for a compiled (cpp/cuda) solution, the one build folder of its key (``loader.build_key``),
  writable when the worker is to build it there and read-only when it holds a complete
  build; the hidden folder around it is then made read-only, so that nothing can be
  written into another key's build or beside it (not even in the sandbox's own view). The
  compilers (g++, nvcc, ninja), the CUDA toolkit and torch's headers need nothing more:
  they are under ``/usr``, ``/usr/local`` and the Python installation, which stay visible
  read-only;
- the driver's shared device nodes and its lane's GPU node alone (``gpu_nodes.py``),
  nothing else of ``/dev``;
- an unprivileged identity of its own: as root, each worker gets a uid and gid no other
  process has (from UID_BASE on) and drops to it inside before it reads any solution code
  (``worker.drop_privileges``), so that its process limit and files are its alone; as
  another user, the user namespace shows it as uid 65534 (mapped to that user);
- process, memory, file-size and open-file limits (``limits``), set before bwrap starts;
- a system-call filter (``syscall_filter.py``): no session of its own (a scheduler
  autogroup, another share of the CPU), no scheduling policy or slice of its own.

Every process a solution starts lives in the sandbox's PID namespace, which dies with its
worker: nothing outlives it. ``probe`` says whether such a sandbox can be made here.
"""

from __future__ import annotations

import functools
import glob
import os
import resource
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .gpu_nodes import Gpu, nodes_for
from .syscall_filter import REFUSED, FilterUnavailable, opened_program

UID = GID = 65534  # nobody / nogroup: the identity inside a user namespace
UID_BASE = 1_900_000_000  # as root, each worker's own uid and gid: UID_BASE + a random offset
SCRATCH_BYTES = 1 << 30  # the worker's writable /tmp
SHM_BYTES = 256 << 20
FILE_BYTES = 1 << 30  # largest file a worker may write (RLIMIT_FSIZE)
WORKER_TASKS = 512  # processes and threads a worker may add (RLIMIT_NPROC)
OPEN_FILES = 4096
# Environment variables a worker keeps; everything else is cleared.
PASS_ENV = (
    "PYTHONPATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_HOME",
    "CUDA_PATH",
    "LD_LIBRARY_PATH",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "TORCH_CUDA_ARCH_LIST",
    "INFERENCE_KERNELS_TRACE",  # the worker logs when each message came and went
    "INFERENCE_KERNELS_FAKE_GRAPH",  # tests only: the CPU stand-in for CUDA graphs (timing.py)
)
ALWAYS_HIDDEN = ("/tmp", "/var/tmp", "/run", "/var/run", "/root", "/home", "/dev/shm")


def bwrap_path() -> str | None:
    """$INFERENCE_KERNELS_BWRAP, else ``bwrap`` on PATH."""
    return os.environ.get("INFERENCE_KERNELS_BWRAP") or shutil.which("bwrap")


def memory_limit() -> int:
    """Bytes of private memory one worker process may hold: half of physical memory."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2


def _tasks_of(uid: int) -> int:
    count = 0
    for status in glob.glob("/proc/[0-9]*/task/[0-9]*/status"):
        try:
            with open(status) as stream:
                for line in stream:
                    if line.startswith("Uid:"):
                        count += int(line.split()[1]) == uid
                        break
        except OSError:
            continue
    return count


def identity() -> int:
    """The uid (and gid) a new worker runs as on the host."""
    return UID_BASE + secrets.randbelow(1 << 24) if os.geteuid() == 0 else os.geteuid()


def limits(memory: int, uid: int) -> dict[int, int]:
    """The rlimits of a worker. RLIMIT_NPROC counts every task of the uid the worker runs
    as: under root a uid of its own, so the margin is all its own; otherwise the user's,
    shared with the user's other processes."""
    return {
        resource.RLIMIT_NPROC: _tasks_of(uid) + WORKER_TASKS,
        resource.RLIMIT_DATA: memory,
        resource.RLIMIT_FSIZE: FILE_BYTES,
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_NOFILE: OPEN_FILES,
        # no priority above the default (nice below 0, its session's autogroup's too), no
        # real-time priority: one share of the CPU, however generous the host's limits
        resource.RLIMIT_NICE: 0,
        resource.RLIMIT_RTPRIO: 0,
    }


def apply_limits(values: dict[int, int]) -> None:
    """Lower this process's limits (in a child before exec); a hard limit already lower
    stays."""
    for which, value in values.items():
        _, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))


def _needed(secrets: list[Path] = ()) -> list[Path]:
    """What a worker must read: the interpreter, its libraries and the judge's code, and
    the other folders on ``sys.path`` except those inside a ``secret`` (the folder the
    judge was started in is on it with ``python -m``: started in the dataset or the
    report's folder, it would otherwise show that folder to the solution)."""
    import inference_kernels

    paths = {
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(sys.exec_prefix),
        Path(os.path.realpath(sys.executable)).parent.parent,
        Path(inference_kernels.__file__).resolve().parent.parent,
    }
    hidden = [Path(os.path.realpath(secret)) for secret in secrets]
    for entry in sys.path:
        if entry and os.path.isdir(entry):
            path = Path(os.path.realpath(entry))
            if not any(_inside(path, secret) for secret in hidden):
                paths.add(path)
    paths = {Path(os.path.realpath(path)) for path in paths}
    return sorted(p for p in paths if not any(q != p and q in p.parents for q in paths))


def repositories(secrets: list[Path]) -> list[Path]:
    """The git folders of the repositories that hold any of ``secrets``: a folder hidden
    from a worker stays readable through its repository's objects (``git show
    HEAD:dataset/...`` from inside read a hidden dataset's captured tensors and tasks).
    For a worktree or submodule, whose ``.git`` is a file naming its git folder, both."""
    found: set[Path] = set()
    for secret in secrets:
        path = Path(os.path.realpath(secret))
        for folder in [path, *path.parents]:
            marker = folder / ".git"
            if marker.is_dir():
                found.add(marker)
            elif marker.is_file():
                found.add(marker)
                text = marker.read_text(errors="replace").strip()
                if text.startswith("gitdir:"):
                    target = Path(text.removeprefix("gitdir:").strip())
                    found.add(Path(os.path.realpath(folder / target)))
            else:
                continue
            break  # the innermost repository holds the secret
    return sorted(found)


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


@dataclass
class Sandbox:
    """How to start workers in bwrap; ``secrets`` are the judge's paths to hide."""

    bwrap: str
    secrets: list[Path] = field(default_factory=list)
    memory: int = field(default_factory=memory_limit)

    def arguments(
        self,
        package: Path,
        cuda: bool,
        build: Path | None = None,
        writable: bool = False,
        gpu: Gpu | None = None,
    ) -> list[str]:
        """bwrap's arguments (before ``--``) for a worker of the solution in ``package``,
        with its build folder ``build`` (writable if told) when it is compiled, and on CUDA
        the driver's nodes and the node of its lane's ``gpu`` alone (``gpu_nodes.py``)."""
        args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        needed = _needed(self.secrets) + [package]
        if build is not None:
            build = Path(os.path.realpath(build))
            needed.append(build)
        mounts: list[tuple[int, list[str]]] = []
        hidden = {Path(os.path.realpath(p)) for p in [*ALWAYS_HIDDEN, *self.secrets]}
        for secret in sorted(hidden):
            if not secret.exists():
                continue
            if secret.is_dir():
                if str(secret) == "/tmp":
                    options = ["--perms", "1777", "--size", str(SCRATCH_BYTES)]
                elif str(secret) == "/dev/shm":
                    options = ["--perms", "1777", "--size", str(SHM_BYTES)]
                else:
                    options = []
                mounts.append((len(secret.parts), [*options, "--tmpfs", str(secret)]))
                for path in needed:
                    if _inside(path, secret) and path != secret:
                        # bwrap would make the folders on the way as private as the
                        # originals (0700): make them traversable for the worker's uid.
                        for folder in reversed(path.parents):
                            if folder != secret and _inside(folder, secret):
                                mounts.append(
                                    (len(folder.parts), ["--perms", "0755", "--dir", str(folder)])
                                )
                        bind = "--bind" if path == build and writable else "--ro-bind"
                        mounts.append((len(path.parts), [bind, str(path), str(path)]))
            elif not any(_inside(path, secret) for path in needed):
                mounts.append((len(secret.parts), ["--ro-bind", "/dev/null", str(secret)]))
        after = []
        if build is not None:
            around = [h for h in hidden if h.is_dir() and _inside(build, h) and h != build]
            if not around:  # visible (read-only) where it is: bound again, as it should be
                bind = "--bind" if writable else "--ro-bind"
                mounts.append((len(build.parts), [bind, str(build), str(build)]))
            deepest = max(around, key=lambda h: len(h.parts), default=None)
            if deepest is not None and str(deepest) not in ("/tmp", "/dev/shm"):
                # the tmpfs hiding the cache, read-only once the build folder is in it
                after = ["--remount-ro", str(deepest)]
        for _, mount in sorted(mounts, key=lambda item: item[0]):
            args += mount
        args += after
        if cuda:
            for node, inside in nodes_for(gpu):
                args += ["--dev-bind", node, inside]
        if os.geteuid() == 0:  # the worker drops to UID itself, before any solution code
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            args += ["--unshare-user", "--uid", str(UID), "--gid", str(GID)]
        args += [
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
            "--chdir",
            "/tmp",
            "--clearenv",
        ]
        environment = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": "/tmp",
            "TMPDIR": "/tmp",
            "USER": "nobody",
            "LOGNAME": "nobody",
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "TRITON_CACHE_DIR": "/tmp/triton",
            "TORCH_EXTENSIONS_DIR": "/tmp/torch_extensions",
        }
        environment.update({k: os.environ[k] for k in PASS_ENV if k in os.environ})
        if cuda:  # its one GPU, by UUID, whatever the judge's numbering (gpu_nodes.py)
            environment.pop("CUDA_VISIBLE_DEVICES", None)
            if gpu is not None and gpu.uuid:
                environment["CUDA_VISIBLE_DEVICES"] = gpu.uuid
        for key, value in environment.items():
            args += ["--setenv", key, value]
        return args

    def command(
        self,
        package: Path,
        cuda: bool,
        worker: list[str],
        syscalls: int,
        build: Path | None = None,
        writable: bool = False,
        gpu: Gpu | None = None,
    ) -> list[str]:
        """bwrap around ``worker``, which it starts under the system-call filter that the
        descriptor ``syscalls`` holds (``syscall_filter.opened_program``; pass it to bwrap)."""
        arguments = self.arguments(package, cuda, build, writable, gpu)
        return [self.bwrap, *arguments, "--seccomp", str(syscalls), "--", *worker]

    def worker_command(
        self,
        package: Path,
        cuda: bool,
        worker: list[str],
        uid: int,
        syscalls: int,
        build: Path | None = None,
        writable: bool = False,
        gpu: Gpu | None = None,
    ) -> list[str]:
        """bwrap around the worker, told the identity to drop to (under root)."""
        worker = [*worker, "--sandboxed", str(uid)]
        return self.command(package, cuda, worker, syscalls, build, writable, gpu)


@functools.cache
def probe(bwrap: str | None) -> tuple[bool, str]:
    """(True, what it is) when a sandbox with these namespaces starts here, else (False,
    why not), in one line."""
    if not bwrap:
        return False, "bwrap (Debian package bubblewrap) is not installed"
    try:
        version = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=20
        ).stdout.strip()
        with opened_program() as syscalls:
            trial = Sandbox(bwrap).command(Path("/"), False, ["/bin/true"], syscalls)
            result = subprocess.run(
                trial, capture_output=True, text=True, timeout=60, pass_fds=[syscalls]
            )
    except FilterUnavailable as error:
        return False, str(error)
    except (OSError, subprocess.SubprocessError) as error:
        return False, f"{bwrap} cannot run: {error}"
    if result.returncode != 0:
        reason = " ".join(result.stderr.split())[:300] or f"exit status {result.returncode}"
        return False, f"{bwrap} cannot make a sandbox here: {reason}"
    return True, version or "bubblewrap"


def record(sandbox: Sandbox | None, description: str) -> dict[str, object]:
    """The environment row's account of how workers were isolated."""
    if sandbox is None:
        return {"sandbox": "none", "reason": description}
    return {
        "sandbox": description,
        "identity": (
            f"a uid/gid of its own per worker (from {UID_BASE}), no capabilities"
            if os.geteuid() == 0
            else f"uid {UID} in a user namespace (mapped to uid {os.geteuid()}), no capabilities"
        ),
        "namespaces": ["pid", "ipc", "net", "uts"] + ([] if os.geteuid() == 0 else ["user"]),
        "filesystem": "read-only; judge caches, key, dataset, report and candidates hidden",
        "syscalls": (
            f"refused: {', '.join(REFUSED)}, F_SETSIG, SIGCONT sent or as a death or exit "
            "signal, clone3 (ENOSYS), other ABIs; setpgid done in name only"
        ),
        "priority": "no nice below 0, no real-time priority",
        "scratch_bytes": SCRATCH_BYTES,
        "limits": {
            "memory_bytes": sandbox.memory,
            "file_bytes": FILE_BYTES,
            "extra_tasks": WORKER_TASKS,
            "open_files": OPEN_FILES,
        },
    }
