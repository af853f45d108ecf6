"""What the diffusion hook sets (``qwen_image.py``, ``ltx.py``) share: module paths, step
counting, and the hand-off between a model-level hook and its inner attention call."""

from __future__ import annotations

import contextvars
import functools
import weakref

import torch

from ._runtime import Patches, track_forward

# The callback of the model-level hook that is waiting for its inner attention call, and a
# flag that hides attention calls made inside another (forward_with_replicated_kv_prefix).
ATTENTION_SINK: contextvars.ContextVar = contextvars.ContextVar("attention_sink", default=None)
INSIDE_ATTENTION: contextvars.ContextVar = contextvars.ContextVar("inside", default=False)


class ModulePaths:
    """Dotted module names of a model, and the module currently running (for GEMMs)."""

    def __init__(self, patches: Patches, context: contextvars.ContextVar) -> None:
        self.names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.stack: list[str] = []
        self.context = context
        hooks = torch.nn.modules.module
        patches.hold(hooks.register_module_forward_pre_hook(self._enter))
        patches.hold(hooks.register_module_forward_hook(self._leave))

    def register(self, root: torch.nn.Module) -> None:
        if root not in self.names:
            for name, module in root.named_modules():
                self.names.setdefault(module, name)

    def get(self, module: torch.nn.Module) -> str | None:
        return self.names.get(module)

    def current(self) -> str | None:
        return self.stack[-1] if self.stack else None

    def _enter(self, module, inputs):
        if self.context.get() is not None and module in self.names:
            self.stack.append(self.names[module])

    def _leave(self, module, inputs, output):
        if self.stack and self.names.get(module) == self.stack[-1]:
            self.stack.pop()


def track_steps(patches: Patches, context, paths: ModulePaths, model_class) -> None:
    """Wrap the transformer's forward: one denoising step per call; register module names."""

    def state_of(original, model, args, kwargs) -> dict:
        paths.register(model)
        paths.stack.clear()
        return {"step": patches.next_step("denoise")}

    track_forward(patches, context, model_class, state_of)


def report_attention(patches: Patches, attention_class, method: str) -> None:
    """Wrap an attention layer's method: run it, then hand the call to the waiting hook."""
    if not hasattr(attention_class, method):
        return

    def make(original):
        def call(self, *args, **kwargs):
            if INSIDE_ATTENTION.get():
                return original(self, *args, **kwargs)
            token = INSIDE_ATTENTION.set(True)
            try:
                result = original(self, *args, **kwargs)
            finally:
                INSIDE_ATTENTION.reset(token)
            sink = ATTENTION_SINK.get()
            if sink is not None:
                sink(self, method, args, kwargs, result)
            return result

        return call

    patches.wrap(attention_class, method, make)


def waiting_for_attention(frame_hook):
    """Wrap a model-level method so that attention calls inside it reach ``frame_hook``."""

    def make(original):
        def call(self, *args, **kwargs):
            frame = {"owner": self, "values": (args, kwargs), "calls": []}
            token = ATTENTION_SINK.set(functools.partial(frame_hook.on_call, frame))
            try:
                result = original(self, *args, **kwargs)
            finally:
                ATTENTION_SINK.reset(token)
            frame_hook.on_return(frame, original)
            return result

        return call

    return make


def all_visible(mask: torch.Tensor | None) -> bool:
    if mask is None:
        return True
    return bool((mask == 0).all()) if mask.is_floating_point() else bool(mask.bool().all())
