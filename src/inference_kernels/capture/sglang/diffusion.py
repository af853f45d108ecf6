"""SGLang capture hooks for the diffusion models: Qwen-Image 2.1 and LTX-2.5.

SGLang (and its CUDA kernels) cannot run in this environment, so these hooks are not
exercised here. The adapter steps they use (``adapters.py``) are unit-tested in
``tests/capture/test_sglang_adapters.py``. The wrapped functions follow the seed capture
(``scripts/capture_inputs.py`` / ``scripts/capture_ltx.py``, SGLang commit 684fea8a) and its
receipts; SGLang is imported only inside ``install_qwen_image`` / ``install_ltx``. The LTX
transformer class name (``LTX2VideoTransformer3DModel``, used to count denoising steps and name
modules) is an assumption the seed does not show.

Qwen-Image (``install_qwen_image``):
- ``torch.nn.functional.linear`` and ``torch.mm`` inside the transformer's forward, leading
  dimensions flattened into M: ``dense_gemm_bf16_nt_n{N}_k{K}``, bias-free BF16, M >= 4096;
- ``QwenImage21Attention.attend_sample``: its ``local_attn`` calls (one per prefix segment)
  compose ``prefix_cached_block_causal_h32_d128_prefix0`` (``image_ids`` from the segment
  list); its ``target_attn`` call gives ``prefix_cached_block_causal_h32_d128``.
LTX (``install_ltx``):
- ``LTX2Attention.forward``'s ``self.attn`` call: ``noncausal_dense_attention_h32_d{64,128}``;
  the engine's mask must be absent or all visible (the definitions have none);
- ``LTX2VideoVaeNeighborhoodAttention.forward``: Q/K/V from ``project_qkv`` and the input of
  ``to_out[0]``: ``neighborhood_attention_3d_*``.

Hooks call the engine first and return exactly its result; only when ``writer.wants`` agrees
do they map the call and ``writer.write`` it. A call that does not fit raises ``ValueError``.
"""

from __future__ import annotations

import contextvars
import functools
import weakref
from typing import Any

import torch

from ._runtime import Patches, bind, new_context, provenance, require_sglang
from .adapters import image_ids_from_segments

MIN_GEMM_ROWS = 4096  # the dense GEMM definitions keep only calls with M >= 4096
PREFIX = "prefix_cached_block_causal_h32_d128"
PREFIX0 = "prefix_cached_block_causal_h32_d128_prefix0"

# The callback of the model-level hook that is waiting for its inner attention call, and a
# flag that hides attention calls made inside another (forward_with_replicated_kv_prefix).
_ATTENTION_SINK: contextvars.ContextVar = contextvars.ContextVar("attention_sink", default=None)
_INSIDE_ATTENTION: contextvars.ContextVar = contextvars.ContextVar("inside", default=False)
_QKV_FRAME: contextvars.ContextVar = contextvars.ContextVar("qkv_frame", default=None)


class _ModulePaths:
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


def _track_steps(patches: Patches, context, paths: _ModulePaths, model_class) -> None:
    """Wrap the transformer's forward: one denoising step per call; register module names."""

    def make(original):
        def forward(self, *args, **kwargs):
            paths.register(self)
            paths.stack.clear()
            token = context.set({"step": patches.next_step("denoise")})
            try:
                return original(self, *args, **kwargs)
            finally:
                context.reset(token)

        return forward

    patches.wrap(model_class, "forward", make)


def _report_attention(patches: Patches, attention_class, method: str) -> None:
    """Wrap an attention layer's method: run it, then hand the call to the waiting hook."""
    if not hasattr(attention_class, method):
        return

    def make(original):
        def call(self, *args, **kwargs):
            if _INSIDE_ATTENTION.get():
                return original(self, *args, **kwargs)
            token = _INSIDE_ATTENTION.set(True)
            try:
                result = original(self, *args, **kwargs)
            finally:
                _INSIDE_ATTENTION.reset(token)
            sink = _ATTENTION_SINK.get()
            if sink is not None:
                sink(self, method, args, kwargs, result)
            return result

        return call

    patches.wrap(attention_class, method, make)


def _waiting_for_attention(frame_hook):
    """Wrap a model-level method so that attention calls inside it reach ``frame_hook``."""

    def make(original):
        def call(self, *args, **kwargs):
            frame = {"owner": self, "values": (args, kwargs), "calls": []}
            token = _ATTENTION_SINK.set(functools.partial(frame_hook.on_call, frame))
            try:
                result = original(self, *args, **kwargs)
            finally:
                _ATTENTION_SINK.reset(token)
            frame_hook.on_return(frame, original)
            return result

        return call

    return make


def _all_visible(mask: torch.Tensor | None) -> bool:
    if mask is None:
        return True
    return bool((mask == 0).all()) if mask.is_floating_point() else bool(mask.bool().all())


# --- Qwen-Image -----------------------------------------------------------------------------


def install_qwen_image(writer: Any) -> Patches:
    """Dense GEMMs and prefix-cached block-causal attention of Qwen-Image 2.1."""
    require_sglang("qwen-image")
    from sglang.multimodal_gen.runtime.layers.attention import LocalAttention, USPAttention
    from sglang.multimodal_gen.runtime.models.dits import qwen_image21

    patches, context = Patches("qwen-image"), new_context()
    paths = _ModulePaths(patches, context)
    _track_steps(patches, context, paths, qwen_image21.QwenImage21Transformer2DModel)

    def gemm(operation, a, weight, output):
        state = context.get()
        if state is None or a.dtype != torch.bfloat16 or weight.dtype != torch.bfloat16:
            return
        n, k = weight.shape
        rows = a.numel() // k
        if rows < MIN_GEMM_ROWS or output.numel() != rows * n:
            return
        name = f"dense_gemm_bf16_nt_n{n}_k{k}"
        record = provenance(
            operation, state, ["flatten_rows"], module_path=paths.current(), variant=f"rows_{rows}"
        )
        if writer.wants(name, record):
            inputs = {"A": a.reshape(rows, k), "W": weight}
            writer.write(name, inputs, {"C": output.reshape(rows, n)}, record)

    def make_linear(original):
        def linear(input, weight, bias=None):
            result = original(input, weight, bias)
            if bias is None and weight.dim() == 2:
                gemm("torch.nn.functional.linear", input, weight, result)
            return result

        return linear

    def make_mm(original):
        def mm(input, mat2, *args, **kwargs):
            result = original(input, mat2, *args, **kwargs)
            if input.dim() == 2 and mat2.dim() == 2:
                gemm("torch.mm", input, mat2.t(), result)
            return result

        return mm

    class Attention:
        @staticmethod
        def on_call(frame, module, method, args, kwargs, result):
            owner = frame["owner"]
            if module is owner.local_attn:
                frame["calls"].append((args, kwargs, result))
            elif module is owner.target_attn:
                target(frame, method, args, kwargs, result)

        @staticmethod
        def on_return(frame, original):
            if frame["calls"]:
                prefix(frame, original)

    def segments_of(frame, original) -> list:
        args, kwargs = frame["values"]
        return [list(s) for s in bind(original, (frame["owner"], *args), kwargs)["segments"]]

    def record_for(frame, operation, adapters, segments=None) -> dict:
        base = paths.get(frame["owner"])
        return provenance(
            operation, context.get(), adapters, module_path=base, prefix_segments=segments
        )

    def target(frame, method, args, kwargs, result):
        if method == "forward_with_replicated_kv_prefix":
            q, k_prefix, v_prefix, k, v = args[:5]
        else:
            q, k_all, v_all = args[:3]
            if not _all_visible(kwargs.get("attn_mask")):
                raise ValueError("target-image attention must see every prefix and image key")
            split = k_all.shape[1] - q.shape[1]
            k_prefix, k, v_prefix, v = (
                k_all[:, :split],
                k_all[:, split:],
                v_all[:, :split],
                v_all[:, split:],
            )
        if q.shape[-1] != 128:
            raise ValueError("the image attention definitions fix the head dimension to 128")
        name = PREFIX if k_prefix.shape[1] else PREFIX0
        record = record_for(frame, "QwenImage21Attention.target_attn", ["split_prefix"])
        record["adapter"] = (
            "Preserve post-normalization/RoPE tensors; the target image is one fully visible block."
        )
        if not writer.wants(name, record):
            return
        inputs = {"Q": q, "K_current": k, "V_current": v}
        if k_prefix.shape[1]:
            inputs.update(K_prefix=k_prefix, V_prefix=v_prefix)
        else:
            inputs["image_ids"] = torch.zeros(q.shape[1], dtype=torch.int32)
        writer.write(name, inputs, {"output": result.reshape(q.shape)}, record)

    def prefix(frame, original):
        segments = segments_of(frame, original)
        adapters = ["concat_segment_calls", "image_ids_from_segments"]
        record = record_for(
            frame, "QwenImage21Attention.local_attn (all prefix segments)", adapters, segments
        )
        record["adapter"] = (
            "Preserve post-normalization/RoPE tensors; encode the engine's segment "
            "visibility as image_ids."
        )
        if not writer.wants(PREFIX0, record):
            return
        calls = frame["calls"]
        if len(calls) != len(segments):
            raise ValueError(f"{len(calls)} local attention calls for {len(segments)} segments")
        q = torch.cat([args[0] for args, _, _ in calls], dim=1)
        k, v = calls[-1][0][1], calls[-1][0][2]
        if q.shape[1] != k.shape[1]:
            raise ValueError("segment queries do not cover the prefix keys")
        output = torch.cat([result for _, _, result in calls], dim=1).reshape(q.shape)
        inputs = {
            "Q": q,
            "K_current": k,
            "V_current": v,
            "image_ids": image_ids_from_segments(segments, q.shape[1]),
        }
        writer.write(PREFIX0, inputs, {"output": output}, record)

    patches.wrap(torch.nn.functional, "linear", make_linear)
    patches.wrap(torch, "mm", make_mm)
    for attention_class in (LocalAttention, USPAttention):
        _report_attention(patches, attention_class, "forward")
        _report_attention(patches, attention_class, "forward_with_replicated_kv_prefix")
    patches.wrap(
        qwen_image21.QwenImage21Attention, "attend_sample", _waiting_for_attention(Attention)
    )
    return patches


# --- LTX-2.5 --------------------------------------------------------------------------------


def install_ltx(writer: Any) -> Patches:
    """Dense transformer attention and the video decoder's 3-D neighborhood attention of LTX-2.5."""
    require_sglang("ltx")
    from sglang.multimodal_gen.runtime.layers.attention import LocalAttention, USPAttention
    from sglang.multimodal_gen.runtime.models.decoders import ltx_2_5_diffusion_decoder as decoder
    from sglang.multimodal_gen.runtime.models.dits import ltx_2

    patches, context = Patches("ltx"), new_context()
    paths = _ModulePaths(patches, context)
    _track_steps(patches, context, paths, ltx_2.LTX2VideoTransformer3DModel)

    class Dense:
        @staticmethod
        def on_call(frame, module, method, args, kwargs, result):
            owner = frame["owner"]
            if module is not owner.attn or method != "forward":
                return
            q, k, v = args[:3]
            mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
            path = paths.get(owner)
            name = f"noncausal_dense_attention_h{q.shape[2]}_d{q.shape[3]}"
            record = provenance(
                "LTX2Attention.attn",
                context.get(),
                ["check_all_visible_mask"],
                module_path=path,
                variant=path.rsplit(".", 1)[-1] if path else None,
            )
            record["adapter"] = (
                "Preserve post-normalization/RoPE Q/K/V; drop the engine mask after "
                "checking it is all visible."
            )
            if not writer.wants(name, record):
                return
            if not _all_visible(mask):
                raise ValueError("mask-free attention capture needs an all-visible engine mask")
            writer.write(name, {"Q": q, "K": k, "V": v}, {"output": result.reshape_as(q)}, record)

        @staticmethod
        def on_return(frame, original):
            return None

    def make_qkv(original):
        def project_qkv(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            frame = _QKV_FRAME.get()
            if frame is not None and "qkv" not in frame:
                frame["qkv"] = result
            return result

        return project_qkv

    def make_neighborhood(original):
        def forward(self, hidden_states, *args, **kwargs):
            kt, ky, kx = self.kernel_size
            batch, t, y, x, _ = hidden_states.shape
            name = f"neighborhood_attention_3d_h{self.heads}_d{self.head_dim}_kt{kt}_ky{ky}_kx{kx}"
            path = paths.get(self) or f"diffusion_decoder.attention_h{self.heads}_{kt}x{ky}x{kx}"
            record = provenance(
                "LTX2VideoVaeNeighborhoodAttention",
                None,
                ["split_heads"],
                module_path=path,
                variant=f"grid_{t}x{y}x{x}",
            )
            record["adapter"] = (
                "Capture the complete grid after normalization, query scaling and RoPE, "
                "before output projection."
            )
            if not writer.wants(name, record):
                return original(self, hidden_states, *args, **kwargs)
            frame: dict = {}

            def keep_attended(module, inputs):
                frame.setdefault("attended", inputs[0])  # returns None: the input is unchanged

            token = _QKV_FRAME.set(frame)
            handle = self.to_out[0].register_forward_pre_hook(keep_attended)
            try:
                result = original(self, hidden_states, *args, **kwargs)
            finally:
                handle.remove()
                _QKV_FRAME.reset(token)
            q, k, v = frame["qkv"]
            output = frame["attended"].reshape(batch, t, y, x, self.heads, self.head_dim)
            writer.write(name, {"Q": q, "K": k, "V": v}, {"output": output}, record)
            return result

        return forward

    for attention_class in (LocalAttention, USPAttention):
        _report_attention(patches, attention_class, "forward")
    patches.wrap(ltx_2.LTX2Attention, "forward", _waiting_for_attention(Dense))
    patches.wrap(decoder.LTX2VideoVaeNeighborhoodAttention, "project_qkv", make_qkv)
    patches.wrap(decoder.LTX2VideoVaeNeighborhoodAttention, "forward", make_neighborhood)
    return patches
