"""The generic PyTorch hook set: capture ``F.linear``, ``torch.mm`` and
``F.scaled_dot_product_attention`` calls by their shapes and dtypes.

Inside ``with TorchHooks(writer, ...):`` those three functions are wrapped. A wrapped
call runs the original first and returns its result untouched, so the engine computes
exactly what it would without the hooks; only then, if the call maps to a definition
and the writer wants it, are its inputs and output recorded:

- ``F.linear(x, W, b)`` and ``torch.mm(a, b)`` in BF16 -> ``dense_gemm_bf16_nt[_bias]_n{N}_k{K}``:
  leading dimensions flattened into M; ``torch.mm``'s right operand stored as [N, K].
- ``F.scaled_dot_product_attention(q, k, v)`` in BF16 with as many K/V heads as query
  heads, no dropout, not causal, no mask or an all-visible one, default scale ->
  ``noncausal_dense_attention_h{H}_d{D}``, tensors stored as [B, N, H, D].

Calls that map to nothing are counted by reason in ``skipped``. With ``model`` given,
each record names the module that made the call (``module_path``).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import torch
import torch.nn.functional as F

from . import generic
from .writer import CaptureError, CaptureWriter


class TorchHooks:
    def __init__(
        self,
        writer: CaptureWriter,
        model: torch.nn.Module | None = None,
        create_definitions: bool = True,
        tags: list[str] | None = None,
    ) -> None:
        self.writer, self.model = writer, model
        self.create_definitions = create_definitions
        self.tags = tags or ["status:draft", "source:torch-hooks"]
        self.provenance: dict[str, Any] = {}  # the current request and step, set by the driver
        self.skipped: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self._modules: list[str] = []
        self._handles: list[Any] = []
        self._originals: dict[str, Any] = {}
        self._busy = False  # our own tensor work must not be captured

    # ------------------------------------------------------------------ install

    def __enter__(self) -> TorchHooks:
        self._originals = {
            "linear": F.linear,
            "mm": torch.mm,
            "sdpa": F.scaled_dot_product_attention,
        }
        F.linear = self._linear
        torch.mm = self._mm
        F.scaled_dot_product_attention = self._sdpa
        if self.model is not None:
            for path, module in self.model.named_modules():
                self._handles.append(module.register_forward_pre_hook(self._enter_module(path)))
                self._handles.append(module.register_forward_hook(self._leave_module))
        return self

    def __exit__(self, *exc: object) -> None:
        F.linear = self._originals["linear"]
        torch.mm = self._originals["mm"]
        F.scaled_dot_product_attention = self._originals["sdpa"]
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _enter_module(self, path: str):
        def hook(module, args) -> None:
            self._modules.append(path)

        return hook

    def _leave_module(self, module, args, output) -> None:
        if self._modules:
            self._modules.pop()

    # ------------------------------------------------------------------ wrapped calls

    def _linear(self, input, weight, bias=None):
        output = self._originals["linear"](input, weight, bias)
        self._observe(self._gemm, "torch.nn.functional.linear", input, weight, bias, output)
        return output

    def _mm(self, input, mat2, *args, **kwargs):
        output = self._originals["mm"](input, mat2, *args, **kwargs)
        if not args and not kwargs:
            self._observe(self._gemm, "torch.mm", input, mat2.t(), None, output)
        return output

    def _sdpa(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
        output = self._originals["sdpa"](
            query,
            key,
            value,
            attn_mask=attn_mask,
            dropout_p=dropout_p,
            is_causal=is_causal,
            **kwargs,
        )
        options = {"attn_mask": attn_mask, "dropout_p": dropout_p, "is_causal": is_causal}
        self._observe(
            self._attention,
            "torch.nn.functional.scaled_dot_product_attention",
            query,
            key,
            value,
            output,
            options | kwargs,
        )
        return output

    def _observe(self, handler, operation: str, *args) -> None:
        if self._busy:
            return
        self._busy = True
        try:
            self.calls[operation] += 1
            with torch.no_grad():
                handler(operation, *args)
        except CaptureError as error:  # a call the definition cannot hold: the engine goes on
            self.skipped[f"{operation}: {error}"] += 1
        finally:
            self._busy = False

    def _provenance(self, operation: str, variant: str, adapters: list[str]) -> dict[str, Any]:
        provenance = {
            **self.provenance,
            "operation": operation,
            "variant": variant,
            "adapters": adapters,
        }
        if self._modules:
            provenance["module_path"] = self._modules[-1]
        return provenance

    def _known(self, name: str, make) -> bool:
        if name in self.writer.definitions:
            return True
        if not self.create_definitions:
            self.skipped[f"{name}: no such definition"] += 1
            return False
        self.writer.define(make())
        return True

    # ------------------------------------------------------------------ mapping

    def _gemm(self, operation, a, weight, bias, output) -> None:
        bf16 = torch.bfloat16
        if a.dtype != bf16 or weight.dtype != bf16 or (bias is not None and bias.dtype != bf16):
            self.skipped[f"{operation}: not BF16"] += 1
            return
        if weight.dim() != 2 or a.dim() < 2 or (bias is not None and bias.dim() != 1):
            self.skipped[f"{operation}: unsupported ranks"] += 1
            return
        n, k = weight.shape
        name = generic.gemm_name(n, k, bias is not None)
        if a.numel() == 0 or n == 0 or k == 0:  # before the reshape, which fails on K = 0
            self.skipped[f"{operation}: empty"] += 1
            return
        rows = a.reshape(-1, k)
        adapters = []
        if a.dim() > 2:
            adapters.append(f"flatten leading dimensions {list(a.shape[:-1])} into M")
        if operation == "torch.mm":
            adapters.append("right operand [K, N] stored transposed as W [N, K]")
        provenance = self._provenance(operation, f"rows_{rows.shape[0]}", adapters)
        if not self.writer.wants(name, provenance):
            return
        if not self._known(
            name, lambda: generic.gemm_definition(n, k, bias is not None, self.tags)
        ):
            return
        inputs = {"A": rows.contiguous(), "W": weight.contiguous()}
        if bias is not None:
            inputs["bias"] = bias.contiguous()
        self.writer.write(name, inputs, {"C": output.reshape(-1, n).contiguous()}, provenance)

    def _attention(self, operation, q, k, v, output, options: dict[str, Any]) -> None:
        reason = self._attention_problem(q, k, v, options)
        if reason:
            self.skipped[f"{operation}: {reason}"] += 1
            return
        batch, heads, queries, head_dim = q.shape
        name = generic.attention_name(heads, head_dim)
        adapters = ["[B, H, N, D] stored as [B, N, H, D]"]
        if options.get("attn_mask") is not None:
            adapters.append("all-visible mask dropped")
        variant = f"b{batch}_nq{queries}_nk{k.shape[2]}"
        provenance = self._provenance(operation, variant, adapters)
        if not self.writer.wants(name, provenance):
            return
        if not self._known(name, lambda: generic.attention_definition(heads, head_dim, self.tags)):
            return
        inputs = {
            key: value.transpose(1, 2).contiguous()
            for key, value in zip("QKV", (q, k, v), strict=True)
        }
        stored = {"output": output.transpose(1, 2).contiguous()}
        self.writer.write(name, inputs, stored, provenance)

    @staticmethod
    def _attention_problem(q, k, v, options: dict[str, Any]) -> str | None:
        if {q.dtype, k.dtype, v.dtype} != {torch.bfloat16}:
            return "not BF16"
        if q.dim() != 4 or k.shape != v.shape or k.shape[1] != q.shape[1]:
            return "not [B, H, N, D] with equal query and key/value heads"
        if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
            return "query and key/value batch or head size differ (broadcast)"
        if 0 in q.shape or 0 in k.shape:
            return "empty"
        if options.get("dropout_p") or options.get("is_causal") or options.get("enable_gqa"):
            return "dropout, causal or GQA"
        scale = options.get("scale")
        if scale is not None and not math.isclose(scale, q.shape[-1] ** -0.5, rel_tol=1e-6):
            return "scale other than head_dim**-0.5"
        mask = options.get("attn_mask")
        if mask is not None:
            visible = bool(mask.all()) if mask.dtype == torch.bool else bool((mask == 0).all())
            if not visible:
                return "masked"
        return None
