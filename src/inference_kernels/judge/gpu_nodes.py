"""The NVIDIA device nodes a CUDA worker's sandbox binds: the driver's shared ones and its
lane's GPU alone.

The driver lets a process use a GPU only through an open file of that GPU's node
(``/dev/nvidiaN``, character device 195:N), and in the sandbox's own ``/dev`` nothing can
be made: a worker reaches the GPUs whose nodes are bound and no other. It gets
``nvidiactl``, ``nvidia-uvm`` and ``nvidia-uvm-tools`` (what a container runtime binds for
compute) and its lane's GPU node, found by minor number (NVML's, else the driver's
``/proc/driver/nvidia/gpus/<PCI address>/information``) and matched against each node's
own device number, not its name. CUDA then shows the worker that GPU alone, as ``cuda:0``,
and ``CUDA_VISIBLE_DEVICES`` names it by UUID whatever the judge's numbering. Until the
twenty-first session every ``/dev/nvidia*`` node was bound: on a host of several GPUs a
solution judged in one lane could run work on the GPU where another lane timed a rival.
Where the lane's GPU cannot be identified and the host has more than one GPU node, no
worker starts (it would see every GPU): each case of the lane then fails to load, its
error naming the judge's environment. MIG slices are not supported (their UUIDs are not
GPUs', and they need the driver's capability nodes): their workers fail to start CUDA.
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass

from .loader import SolutionLoadError

NVIDIA_MAJOR = 195
CONTROL_MINORS = 254  # 254 is nvidia-modeset, 255 nvidiactl: a GPU's minor is below
SHARED = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


class GpuNotIsolated(SolutionLoadError):
    """The lane's GPU cannot be told from the others: the judge's environment, not the
    solution (every case of the lane fails to load, and its error says so)."""


@dataclass(frozen=True)
class Gpu:
    """A lane's GPU as its worker's sandbox needs it: its node's minor number and its UUID
    (each None where neither NVML nor the driver says)."""

    minor: int | None
    uuid: str | None


_known: dict[str, Gpu] = {}  # device -> its Gpu, once identified (a failure is asked again)


def gpu_of(device: str) -> Gpu:
    """The GPU of ``device`` ("cuda:N", the judge's numbering), in a process that uses it."""
    if device in _known:
        return _known[device]
    import torch

    from .clocks import gpu_uuid, nvml

    cuda = torch.device(device)
    minor = None
    if (found := nvml(cuda)) is not None:
        pynvml, handle = found
        try:
            minor = int(pynvml.nvmlDeviceGetMinorNumber(handle))
        except Exception:
            minor = None
    if minor is None:
        minor = _driver_minor(torch.cuda.get_device_properties(cuda))
    gpu = Gpu(minor, gpu_uuid(cuda))
    if gpu.minor is not None and gpu.uuid is not None:
        _known[device] = gpu
    return gpu


def _driver_minor(properties) -> int | None:
    """The driver's "Device Minor" of the GPU at the device's PCI address."""
    try:
        address = (
            f"{properties.pci_domain_id:04x}:{properties.pci_bus_id:02x}:"
            f"{properties.pci_device_id:02x}.0"
        )
        with open(f"/proc/driver/nvidia/gpus/{address}/information") as stream:
            for line in stream:
                if line.startswith("Device Minor:"):
                    return int(line.split(":", 1)[1])
    except (AttributeError, OSError, ValueError):
        return None
    return None


def gpu_nodes() -> dict[int, str]:
    """Minor number -> node of every GPU of the host (character devices 195:0-253)."""
    found = {}
    for node in sorted(glob.glob("/dev/nvidia*")):
        try:
            status = os.stat(node)
        except OSError:
            continue
        number = status.st_rdev
        if (
            stat.S_ISCHR(status.st_mode)
            and os.major(number) == NVIDIA_MAJOR
            and os.minor(number) < CONTROL_MINORS
        ):
            found[os.minor(number)] = node
    return found


def nodes_for(
    gpu: Gpu | None,
    found: dict[int, str] | None = None,
    present: Callable[[str], bool] | None = None,
) -> list[tuple[str, str]]:
    """(host node, its path in the sandbox) for each node a CUDA worker of ``gpu``'s lane
    gets (``found``: the host's GPU nodes; ``present``: whether a shared node exists). The
    GPU's node is bound where the driver's library opens it, ``/dev/nvidia<minor>``,
    whatever its name on the host."""
    gpus = gpu_nodes() if found is None else found
    present = present or os.path.exists
    minor = None if gpu is None else gpu.minor
    if minor is None and len(gpus) == 1:
        minor = next(iter(gpus))
    if minor is not None and minor in gpus:
        own = [(gpus[minor], f"/dev/nvidia{minor}")]
    elif minor is None and not gpus:
        own = []
    else:
        raise GpuNotIsolated(
            f"the judge's environment, not the solution: the sandbox cannot tell this "
            f"lane's GPU node among {len(gpus)} "
            f"(minor {minor}; NVML and /proc/driver/nvidia did not say): a worker would "
            "reach every GPU of the host, so none starts"
        )
    return [(node, node) for node in SHARED if present(node)] + own
