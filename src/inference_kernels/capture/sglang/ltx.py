"""SGLang capture hooks for the diffusion model LTX-2.5.

SGLang (and its CUDA kernels) cannot run in this environment, so these hooks are not
exercised here. The adapter steps they use (``adapters.py``) are unit-tested in
``tests/capture/test_sglang_adapters.py``. The wrapped functions follow the seed capture
(``scripts/capture_inputs.py`` / ``scripts/capture_ltx.py``, SGLang commit 684fea8a) and its
receipts; SGLang is imported only inside ``install_ltx``. The LTX transformer class name
(``LTX2VideoTransformer3DModel``, used to count denoising steps and name modules) is an
assumption the seed does not show.

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
from typing import Any

from ._runtime import Patches, new_context, provenance, require_sglang
from .diffusion_common import (
    ModulePaths,
    all_visible,
    report_attention,
    track_steps,
    waiting_for_attention,
)

# --- LTX-2.5 --------------------------------------------------------------------------------

# The neighborhood-attention forward running now: ``project_qkv`` leaves its Q, K, V there.
QKV_FRAME: contextvars.ContextVar = contextvars.ContextVar("qkv_frame", default=None)


def install_ltx(writer: Any) -> Patches:
    """Dense transformer attention and the video decoder's 3-D neighborhood attention of LTX-2.5."""
    require_sglang("ltx")
    from sglang.multimodal_gen.runtime.layers.attention import LocalAttention, USPAttention
    from sglang.multimodal_gen.runtime.models.decoders import ltx_2_5_diffusion_decoder as decoder
    from sglang.multimodal_gen.runtime.models.dits import ltx_2

    patches, context = Patches("ltx"), new_context()
    paths = ModulePaths(patches, context)
    track_steps(patches, context, paths, ltx_2.LTX2VideoTransformer3DModel)

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
            if not all_visible(mask):
                raise ValueError("mask-free attention capture needs an all-visible engine mask")
            writer.write(name, {"Q": q, "K": k, "V": v}, {"output": result.reshape_as(q)}, record)

        @staticmethod
        def on_return(frame, original):
            return None

    def make_qkv(original):
        def project_qkv(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            frame = QKV_FRAME.get()
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

            token = QKV_FRAME.set(frame)
            handle = self.to_out[0].register_forward_pre_hook(keep_attended)
            try:
                result = original(self, hidden_states, *args, **kwargs)
            finally:
                handle.remove()
                QKV_FRAME.reset(token)
            q, k, v = frame["qkv"]
            output = frame["attended"].reshape(batch, t, y, x, self.heads, self.head_dim)
            writer.write(name, {"Q": q, "K": k, "V": v}, {"output": output}, record)
            return result

        return forward

    for attention_class in (LocalAttention, USPAttention):
        report_attention(patches, attention_class, "forward")
    patches.wrap(ltx_2.LTX2Attention, "forward", waiting_for_attention(Dense))
    patches.wrap(decoder.LTX2VideoVaeNeighborhoodAttention, "project_qkv", make_qkv)
    patches.wrap(decoder.LTX2VideoVaeNeighborhoodAttention, "forward", make_neighborhood)
    return patches
