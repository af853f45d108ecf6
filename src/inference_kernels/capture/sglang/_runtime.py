"""Plumbing shared by the SGLang hook sets: patching, argument binding, step context, ranks.

Nothing here imports SGLang. The hooks that use it cannot run in this environment (SGLang
and its CUDA kernels are not installed); see ``qwen_image.py``, ``ltx.py``,
``qwen_next.py`` and ``deepseek.py``.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

import torch

ENGINE = "SGLang"


class SGLangUnavailableError(ImportError):
    """The hook set needs SGLang, which this process cannot import."""


def require_sglang(hook_set: str) -> None:
    try:
        importlib.import_module("sglang")
    except ImportError as error:
        raise SGLangUnavailableError(
            f"the {hook_set!r} capture hooks wrap SGLang functions, but `import sglang` failed "
            f"({error}); run the capture on a machine with SGLang and its CUDA kernels"
        ) from error


def bind(function: Callable, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by parameter name, defaults filled in."""
    bound = inspect.signature(function).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


class Patches:
    """Wraps attributes in place and can put the originals back (``restore``).

    ``install_*`` returns one of these; ``steps`` holds the per-mode step counters, which a
    driver resets between requests with ``reset_steps``.
    """

    def __init__(self, hook_set: str) -> None:
        self.hook_set = hook_set
        self.steps: dict[str, int] = {}
        self._saved: list[tuple[Any, str, Any]] = []
        self._handles: list[Any] = []

    def wrap(self, owner: Any, name: str, make: Callable[[Callable], Callable]) -> None:
        static = inspect.getattr_static(owner, name)
        original = getattr(owner, name)
        wrapper = functools.wraps(original)(make(original))
        if isinstance(static, staticmethod):
            wrapper = staticmethod(wrapper)
        self._saved.append((owner, name, static))
        setattr(owner, name, wrapper)

    def hold(self, handle: Any) -> None:
        """Keep a removable hook handle, removed by ``restore``."""
        self._handles.append(handle)

    def next_step(self, mode: str) -> int:
        step = self.steps.get(mode, 0)
        self.steps[mode] = step + 1
        return step

    def reset_steps(self) -> None:
        self.steps.clear()

    def restore(self) -> None:
        for handle in reversed(self._handles):
            handle.remove()
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._handles.clear()
        self._saved.clear()


def provenance(operation: str, context: dict | None, adapters: list[str], **extra) -> dict:
    """The common receipt keys: engine, operation, step and scheduler state, adapters."""
    record: dict[str, Any] = {"engine": ENGINE, "operation": operation}
    if context:
        record["step"] = context.get("step", 0)
        for key in ("scheduler_mode", "scheduler_sequence_lengths"):
            if context.get(key) is not None:
                record[key] = context[key]
    else:
        record["step"] = 0
    record["adapters"] = list(adapters)
    record.update({key: value for key, value in extra.items() if value is not None})
    return record


def track_forward(
    patches: Patches, context: contextvars.ContextVar, model_class, state_of: Callable
) -> None:
    """Wrap ``model_class.forward`` so that the hooks below it read the step state
    ``state_of(original, self, args, kwargs)`` from ``context`` (None: run untracked)."""

    def make(original):
        def forward(self, *args, **kwargs):
            state = state_of(original, self, args, kwargs)
            if state is None:
                return original(self, *args, **kwargs)
            token = context.set(state)
            try:
                return original(self, *args, **kwargs)
            finally:
                context.reset(token)

        return forward

    patches.wrap(model_class, "forward", make)


def new_context() -> contextvars.ContextVar:
    return contextvars.ContextVar("sglang_capture_context", default=None)


# --- tensor-parallel ranks ------------------------------------------------------------------


def _distributed() -> Any | None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) outside torch.distributed."""
    dist = _distributed()
    return (dist.get_rank(), dist.get_world_size()) if dist else (0, 1)


def decide(writer: Any, name: str, record: dict) -> bool:
    """``writer.wants`` as rank 0 answers it, the same on every rank.

    Hooks that gather across ranks must take the same branch everywhere or the collectives
    hang; rank 0 (the only rank that writes) decides and broadcasts its answer.
    """
    dist = _distributed()
    if dist is None:
        return bool(writer.wants(name, record))
    answer = [bool(writer.wants(name, record)) if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(answer, src=0)
    return bool(answer[0])


def gather_shards(value: torch.Tensor, dim: int = 0) -> list[torch.Tensor] | None:
    """Every rank's ``value`` (sizes along ``dim`` may differ), on CPU, on rank 0; else None.

    One-byte float dtypes travel as uint8 and come back in their own dtype.
    """
    dist = _distributed()
    if dist is None:
        return [value.detach().cpu()]
    value = value.detach().contiguous()
    wire = (
        value.view(torch.uint8)
        if value.element_size() == 1 and value.is_floating_point()
        else value
    )
    sizes: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(sizes, wire.shape[dim])
    shape = list(wire.shape)
    shape[dim] = max(sizes)
    padded = torch.zeros(shape, dtype=wire.dtype, device=wire.device)
    padded.narrow(dim, 0, wire.shape[dim]).copy_(wire)
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded)
    if dist.get_rank() != 0:
        return None
    shards = [part.narrow(dim, 0, size).cpu() for part, size in zip(parts, sizes, strict=True)]
    return [shard.view(value.dtype) for shard in shards] if wire is not value else shards
