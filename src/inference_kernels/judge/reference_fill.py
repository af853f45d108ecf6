"""Filling the judge's reference cache ahead of a run (``reference --cache DIR``), with the
CPU's work beside the device's.

Each workload of a fill costs three things: its inputs (stand-ins drawn on the CPU, or
captured tensors read and hashed there), its reference (on the device), and storing the
outputs (copied to the host, serialized, authenticated and written). One after another
they took 364 s for the whole dataset on the H200 at c839524, 0.32 s a workload, most of it
on the CPU while the device waited. Here the next workload's inputs are made by the
prefetch helper (``prefetch.py``, the referee's) while the current reference runs, and the
outputs are stored by a thread of their own while the next one does; at most one store
waits, so the host holds at most two workloads' outputs.

A store that fails (a full disk) is kept in ``failed``, naming its workload, for the command
to stop on; the references already kept stay valid, each authenticated on its own.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from .. import schema
from ..materialize.inputs import Materialized
from ..signing import key as signing_key
from .prefetch import Prefetcher, request_for
from .reference_cache import ReferenceCache, reference_key


class Fill:
    """The cache a fill writes, its writer thread and (``prefetch``) its input helper."""

    def __init__(self, cache: Path, device: str, prefetch: bool):
        self.cache = ReferenceCache(cache / "references", signing_key())
        self.device = device
        self.prefetcher = Prefetcher() if prefetch else None
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="reference-store")
        self.pending: tuple[str, Future] | None = None  # (what it stores, the store)
        self.failed: str | None = None  # why a store failed, naming its workload

    request = staticmethod(request_for)  # what names a workload's inputs to the helper

    def ahead(self, request: dict[str, Any]) -> None:
        """Start making these inputs on the CPU (the next workload's)."""
        if self.prefetcher is not None:
            self.prefetcher.ask(request)

    def inputs(self, request: dict[str, Any]) -> Materialized | None:
        """The inputs made ahead for this workload, still on the CPU; None: make them."""
        return self.prefetcher.take(request) if self.prefetcher is not None else None

    def keeper(self, definition: schema.Definition, workload: schema.Workload):
        """``keep(outputs)`` for ``run_case``: the outputs are copied to the host here and
        stored by the writer thread, after the store before them is done."""
        entry = reference_key(definition, workload, self.device)
        name = f"{definition.name} {workload.uuid}"

        def keep(outputs: list[torch.Tensor]) -> None:
            host = [o.detach().to("cpu").contiguous() for o in outputs]
            self.wait()
            if self.failed is None:  # after a failed store the command stops: none more
                self.pending = (name, self.writer.submit(self.cache.store, entry, host))

        return keep

    def wait(self) -> None:
        """Until the last store is done (``failed`` says if it failed)."""
        if self.pending is None:
            return
        name, store = self.pending
        self.pending = None
        try:
            store.result()
        except Exception as error:  # its own workload's, not the next one's (run_case's)
            why = f"{type(error).__name__}: {error}"
            self.failed = f"{self.cache.folder}: storing the reference of {name}: {why}"

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self.writer.shutdown()
            if self.prefetcher is not None:
                self.prefetcher.close()
