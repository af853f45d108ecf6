"""The next workload's inputs, made while the current case runs.

Stand-ins are drawn on the CPU (numpy's PCG64, so that they are the same bytes on every
device) and captured inputs are read and hashed there too: 0.17 s a case over the H200
audit at ae23d6d, while the device waited. Drawn in the referee during the samples, they
would hold its GIL and delay its own timing of each sample from outside the sandbox.

So the lane names the next workload as soon as the current one is prepared (``prefetch``),
the referee passes it to a helper process that materializes it on the CPU, on a few
threads, into one memfd, and sends the memfd back with a JSON header. When the lane then
asks for that workload, the referee maps the memfd (privately: its pristine inputs are its
own) and copies the tensors to its device.

The helper runs our code only, as the referee's own user; workers cannot reach it (they
live in the sandbox, under uids of their own, with /dev/shm hidden). What it does not do,
the referee does itself, as before: a definition whose stand-ins include a model parameter
(the grouped GEMMs' experts, which the referee keeps on the device between workloads,
``standins.parameter_on``), a tensor that is not contiguous, an input it cannot read (the
referee then reports the error itself), a helper that died or took too long.

    python -m inference_kernels.judge.prefetch FD     # the helper; FD a SOCK_SEQPACKET socket
"""

from __future__ import annotations

import json
import mmap
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ..dtypes import DTYPE_NAMES, torch_dtype
from ..materialize.inputs import Materialized, draws, materialize
from ..materialize.standins import MODEL_PARAMETERS, generator_for
from ..schema import CaptureRecord, Definition, Workload

# The helper's threads: the referee, its background load and the worker keep the other half.
THREADS = max(1, min(8, (os.cpu_count() or 2) // 2))
ALIGN = 256
MESSAGE = 1 << 24  # bytes: the largest request or header (a definition is a few kB)
FIELDS = ("definition", "workload", "capture", "data_root")  # what names a workload's inputs


def request_for(
    definition: Definition, workload: Workload, capture: CaptureRecord | None, data_root: Path
) -> dict[str, Any]:
    """What names a workload's inputs (the FIELDS), for ``Prefetcher.ask`` and ``take``."""
    return {
        "definition": definition.model_dump_json(),
        "workload": workload.model_dump(mode="json"),
        "capture": capture.model_dump(mode="json") if capture else None,
        "data_root": str(data_root),
    }


def _key(request: dict[str, Any]) -> str:
    return json.dumps([request.get(field) for field in FIELDS], sort_keys=True)


class Prefetcher:
    """The referee's end: ``ask`` for a workload's inputs, ``take`` them when it comes."""

    def __init__(self, threads: int = THREADS):
        self.threads = threads
        self.process: subprocess.Popen | None = None
        self.socket: socket.socket | None = None
        self.pending: str | None = None  # the key of the workload asked for
        self.asked = 0  # the id of the last request

    def _start(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        threads = str(self.threads)
        environment = {
            **os.environ,
            "INFERENCE_KERNELS_STANDIN_THREADS": threads,
            "OMP_NUM_THREADS": threads,
            "CUDA_VISIBLE_DEVICES": "",  # the CPU only
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "inference_kernels.judge.prefetch", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            env=environment,
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.socket = mine

    def ask(self, request: dict[str, Any]) -> None:
        """Start making this workload's inputs, unless they are being made already."""
        key = _key(request)
        if key == self.pending:
            return
        if self.process is None or self.process.poll() is not None:
            self.close()
            self._start()
        self.asked += 1
        message = {"id": self.asked, **{field: request.get(field) for field in FIELDS}}
        try:
            self.socket.send(json.dumps(message).encode())
        except OSError:
            self.close()
            return
        self.pending = key

    def has(self, request: dict[str, Any]) -> bool:
        """Whether this workload's inputs were asked for (and not yet taken)."""
        return self.pending is not None and _key(request) == self.pending

    def take(self, request: dict[str, Any], seconds: float = 600.0) -> Materialized | None:
        """The inputs asked for, if this is that workload and the helper made them."""
        if not self.has(request):
            return None
        self.pending = None
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.socket], [], [], left)[0]:
                self.close()  # too slow: the referee makes them itself
                return None
            try:
                data, fds, _, _ = socket.recv_fds(self.socket, MESSAGE, 1)
            except OSError:
                data, fds = b"", []
            if not data:  # the helper is gone
                self.close()
                return None
            header = json.loads(data)
            if header["id"] == self.asked:
                return _opened(header, fds[0] if fds else None)
            for fd in fds:  # an answer to an earlier request, no longer wanted
                os.close(fd)

    def close(self) -> None:
        if self.socket is not None:
            self.socket.close()
        if self.process is not None:
            self.process.kill()
            self.process.wait()
        self.process, self.socket, self.pending = None, None, None


def _opened(header: dict[str, Any], fd: int | None) -> Materialized | None:
    """The inputs of a header and its memfd, mapped privately (then the fd is closed)."""
    if not header["ok"]:
        if fd is not None:
            os.close(fd)
        return None
    buffer = torch.empty(0, dtype=torch.uint8)
    if fd is not None:
        mapped = mmap.mmap(fd, header["size"], flags=mmap.MAP_PRIVATE)
        os.close(fd)
        buffer = torch.frombuffer(mapped, dtype=torch.uint8)
    values: list[Any] = []
    for entry in header["values"]:
        if "tensor" not in entry:
            values.append(entry["value"])
            continue
        tensor, dtype = entry["tensor"], torch_dtype(entry["tensor"]["dtype"])
        size = tensor["bytes"]
        flat = buffer[tensor["offset"] : tensor["offset"] + size]
        values.append(flat.view(dtype).view(tensor["shape"]))
    return Materialized(
        header["names"], values, header["origins"], header["generator"], header["metadata"]
    )


# ----------------------------------------------------------------------------- the helper


def _declined(identifier: int, why: str) -> tuple[dict[str, Any], int | None]:
    return {"id": identifier, "ok": False, "why": why}, None


def made(request: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """The header and memfd (or None) of the inputs a request names."""
    identifier = request["id"]
    definition = Definition.model_validate_json(request["definition"])
    workload = Workload.model_validate(request["workload"])
    capture = request.get("capture")
    capture = CaptureRecord.model_validate(capture) if capture else None
    if draws(definition, workload) and generator_for(definition)[0] in MODEL_PARAMETERS:
        return _declined(identifier, "model parameters stay with the referee")
    try:
        result = materialize(
            definition, workload, data_root=Path(request["data_root"]), capture=capture
        )
    except Exception as error:  # the referee makes them itself and reports the error
        return _declined(identifier, f"{type(error).__name__}: {error}"[:300])
    entries, tensors, size = [], [], 0
    for value in result.values:
        if isinstance(value, torch.Tensor):
            if not value.is_contiguous() or value.dtype not in DTYPE_NAMES:
                return _declined(identifier, "a tensor it cannot pass as plain bytes")
            nbytes = value.numel() * value.element_size()
            entries.append(
                {
                    "tensor": {
                        "dtype": DTYPE_NAMES[value.dtype],
                        "shape": list(value.shape),
                        "offset": size,
                        "bytes": nbytes,
                    }
                }
            )
            tensors.append((size, value))
            size += -(-nbytes // ALIGN) * ALIGN
        elif value is None or isinstance(value, (bool, int, float, str)):
            entries.append({"value": value})
        else:
            return _declined(identifier, f"an input of type {type(value).__name__}")
    fd = None
    if size:
        fd = os.memfd_create("inference-kernels-inputs", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        with mmap.mmap(fd, size) as mapped:
            buffer = torch.frombuffer(mapped, dtype=torch.uint8)
            for offset, value in tensors:
                flat = value.reshape(-1).view(torch.uint8)
                buffer[offset : offset + flat.numel()].copy_(flat)
            del buffer
    header = {
        "id": identifier,
        "ok": True,
        "names": result.names,
        "values": entries,
        "origins": result.origins,
        "generator": result.generator,
        "metadata": result.metadata,
        "size": size,
    }
    return header, fd


def serve(channel: socket.socket) -> None:
    """Answer requests one by one until the referee closes its end."""
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", THREADS)))
    while True:
        data = channel.recv(MESSAGE)
        if not data:
            return
        header, fd = made(json.loads(data))
        socket.send_fds(channel, [json.dumps(header).encode()], [fd] if fd is not None else [])
        if fd is not None:
            os.close(fd)


def main() -> None:
    serve(socket.socket(fileno=int(sys.argv[1])))


if __name__ == "__main__":
    main()
