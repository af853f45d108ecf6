import json

import pytest
import torch
from safetensors.torch import save_file

from inference_kernels.dataset import constraints
from inference_kernels.dataset.check import check_dataset
from inference_kernels.dataset.layout import load_dataset


def test_axis_expressions_evaluate():
    assert constraints.evaluate("Nall == Np + Nq", {"Nall": 7, "Np": 3, "Nq": 4}) is True
    assert constraints.evaluate("T >= KT", {"T": 2, "KT": 3}) is False
    assert constraints.evaluate("ceil_div(N, 16) <= MP", {"N": 33, "MP": 3}) is True


def test_value_expressions_read_tensors():
    values = {"total_seq_len": 9, "cu_seqlens": torch.tensor([0, 4, 9])}
    assert constraints.evaluate("total_seq_len == cu_seqlens[-1].item()", values) is True
    assert constraints.evaluate("(cu_seqlens.diff() >= 0).all()", values) is True
    ids = torch.tensor([0, 3, 2])
    assert constraints.evaluate("(expert_id.diff() >= 0).all()", {"expert_id": ids}) is False
    table = {"block_ids": torch.tensor([[0, 1, -1]]), "context_lens": torch.tensor([8])}
    assert constraints.evaluate("(block_ids < (context_lens // 4)[:, None]).all()", table)


def test_missing_names_defer():
    assert (
        constraints.evaluate("total_seq_len == cu_seqlens[-1].item()", {"total_seq_len": 3}) is None
    )


@pytest.mark.parametrize(
    "expression",
    ["__import__('os').system('true')", "x.__class__", "open('f')", "[i for i in x]", "lambda: 1"],
)
def test_anything_outside_the_grammar_is_refused(expression):
    with pytest.raises(constraints.ConstraintSyntaxError):
        constraints.parse(expression)


def test_runtime_failures_are_reported_not_raised_raw():
    with pytest.raises(ValueError, match="cannot evaluate"):
        constraints.evaluate("x[5] > 0", {"x": torch.zeros(2)})


# --- `.shape`, as flashinfer-bench's published definitions use it -------------------------
#
# Every attribute constraint in flashinfer-bench's definitions (flashinfer-ai/flashinfer-bench,
# flashinfer_trace/definitions/, last at commit ecafa9c2c620 before they moved to the
# flashinfer-trace dataset) is `<input>.shape[<int>] <op> <axis expression>`:
UPSTREAM_SHAPE_CONSTRAINTS = [
    # moe/moe_fp8_block_scale_ds_routing_topk8_ng1_kg1_e384_h7168_i2048.json (and 17 more moe/)
    "gemm1_weights.shape[1] == 2 * intermediate_size",
    "gemm2_weights.shape[1] == hidden_size",
    "gemm2_weights.shape[2] == intermediate_size",
    # dsa_paged/dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps1.json (and _ps64)
    "sparse_indices.shape[0] == num_tokens",
    "sparse_indices.shape[-1] == topk",
    "ckv_cache.shape[1] == page_size",
    # dsa_paged/dsa_sparse_prefill_causal_h16_ckv512_kpe64_topk256_ps1.json (before 24f77b76)
    "sparse_indices.shape[0] == total_num_tokens",
]
AXES = {
    "intermediate_size": 4,
    "hidden_size": 6,
    "num_tokens": 3,
    "total_num_tokens": 3,
    "topk": 5,
    "page_size": 1,
}
# The upstream declared shapes, at the small sizes above (num_local_experts 2, num_pages 7).
CONSISTENT = {
    "gemm1_weights": (2, 8, 6),
    "gemm2_weights": (2, 6, 4),
    "sparse_indices": (3, 5),
    "ckv_cache": (7, 1, 16),
}
INCONSISTENT = {  # every dimension a constraint reads is off by one
    "gemm1_weights": (2, 9, 6),
    "gemm2_weights": (2, 7, 5),
    "sparse_indices": (4, 6),
    "ckv_cache": (7, 2, 16),
}


@pytest.mark.parametrize("expression", UPSTREAM_SHAPE_CONSTRAINTS)
def test_upstream_shape_constraints_hold_on_tensors_of_consistent_shapes(expression):
    good = {name: torch.zeros(shape) for name, shape in CONSISTENT.items()}
    bad = {name: torch.zeros(shape) for name, shape in INCONSISTENT.items()}
    assert constraints.evaluate(expression, {**AXES, **good}) is True
    assert constraints.evaluate(expression, {**AXES, **bad}) is False


@pytest.mark.parametrize("expression", UPSTREAM_SHAPE_CONSTRAINTS)
def test_upstream_shape_constraints_need_only_the_shapes(expression):
    assert constraints.evaluate(expression, AXES) is None  # no shapes: deferred, as before
    assert constraints.evaluate(expression, AXES, CONSISTENT) is True
    assert constraints.evaluate(expression, AXES, INCONSISTENT) is False
    assert constraints.needs_values(expression, set(CONSISTENT)) is False


def test_shapes_behave_as_a_tensors_shape():
    shapes = {"x": [2, 3, 4]}
    tensor = {"x": torch.zeros(2, 3, 4)}
    for expression, expected in [
        ("len(x.shape) == 3", True),
        ("x.shape[-1] == 4", True),
        ("x.shape[1:] == (3, 4)", True),
        ("x.shape == (2, 3, 4)", True),
        ("x.shape[0] * x.shape[1] == 5", False),
        ("max(x.shape) == 4", True),
    ]:
        assert constraints.evaluate(expression, {}, shapes) is expected, expression
        assert constraints.evaluate(expression, tensor) is expected, expression


def test_a_constraint_on_values_still_waits_for_the_values():
    """Shapes do not stand in for values: `x.shape[0] == x.sum()` reads x's values."""
    shapes = {"x": [3], "cu_seqlens": [4]}
    assert constraints.evaluate("x.shape[0] == x.sum()", {}, shapes) is None
    assert constraints.evaluate("n == cu_seqlens[-1].item()", {"n": 3}, shapes) is None
    assert constraints.needs_values("x.shape[0] == x.sum()", {"x"}) is True
    assert constraints.evaluate("x.shape[0] == x.sum()", {"x": torch.ones(3)}) is True


def test_a_shape_that_is_out_of_range_is_a_clear_evaluation_error():
    with pytest.raises(ValueError, match="cannot evaluate: IndexError"):
        constraints.evaluate("x.shape[2] == 1", {}, {"x": [1, 2]})
    with pytest.raises(ValueError, match="cannot evaluate: AttributeError"):
        constraints.evaluate("n.shape[0] == 1", {"n": 3})  # an axis has no shape


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("x.__class__", "attribute '__class__' is not allowed"),
        ("x.shape.__class__", "attribute '__class__' is not allowed"),
        ("().__class__.__bases__", "attribute '__bases__' is not allowed"),
        ("x.T", "attribute 'T' is not allowed"),
        ("x.ndim == 2", "attribute 'ndim' is not allowed"),  # not used upstream
        ("x.dtype == 1", "attribute 'dtype' is not allowed"),  # not used upstream
        ("x.shape.index(3)", "attribute 'index' is not allowed"),
        ("x[0].shape[0] == 1", "'.shape' is allowed only directly on an input's name"),
        ("(1).shape", "'.shape' is allowed only directly on an input's name"),
        ("len.shape", "'.shape' is allowed only directly on an input's name"),
        ("(1).numel()", "method 'numel' on a constant is not allowed"),
        ("'a'.upper()", "attribute 'upper' is not allowed"),
        ("(lambda: 1)()", "Lambda is not allowed"),
        ("[d for d in x.shape]", "ListComp is not allowed"),
        ("min(d for d in x.shape) > 0", "GeneratorExp is not allowed"),
        ("getattr(x, 'shape')", "function 'getattr' is not allowed"),
        ("__builtins__['open']", "name '__builtins__' is not allowed"),
        ("__import__('os')", "function '__import__' is not allowed"),
    ],
)
def test_attacks_are_refused_before_evaluation(expression, message):
    with pytest.raises(constraints.ConstraintSyntaxError, match=message):
        constraints.parse(expression)
    with pytest.raises(constraints.ConstraintSyntaxError, match=message):
        constraints.evaluate(expression, {"x": torch.zeros(2)}, {"x": [2]})


# flashinfer-ai/flashinfer-bench, flashinfer_trace/definitions/dsa_paged/
# dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps1.json at commit
# ecafa9c2c62007667838226068b21ca9ff1c9183 (blob 2d48a80b61ea), verbatim.
UPSTREAM_DSA_DEFINITION = r"""{
  "name": "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps1",
  "description": "Batched Native Sparse Attention (DSA) with sparse TopK KV cache selection. Captured from DeepSeek-V3.2 with tensor parallel size 8. Uses sparse indexing to select only top-K KV cache entries for attention computation. Works for both prefill and decode stages.",
  "op_type": "dsa_paged",
  "tags": [
    "status:verified",
    "model:deepseek-v3.2",
    "sparse:topk",
    "fi_api:flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla",
    "tp:8"
  ],
  "axes": {
    "num_tokens": {
      "type": "var",
      "description": "Number of tokens (batch_size for decode, total_num_tokens for prefill)."
    },
    "num_qo_heads": {
      "type": "const",
      "value": 16,
      "description": "Number of query heads after tensor parallel split (128/8=16)."
    },
    "head_dim_ckv": {
      "type": "const",
      "value": 512,
      "description": "Compressed KV head dimension."
    },
    "head_dim_kpe": {
      "type": "const",
      "value": 64,
      "description": "Key positional encoding dimension."
    },
    "page_size": {
      "type": "const",
      "value": 1,
      "description": "Page size for KV cache (token-level)."
    },
    "topk": {
      "type": "const",
      "value": 2048,
      "description": "Number of top-K KV cache entries selected for sparse attention."
    },
    "num_pages": {
      "type": "var",
      "description": "Total number of allocated pages in the KV cache."
    }
  },
  "constraints": [
    "sparse_indices.shape[0] == num_tokens",
    "sparse_indices.shape[-1] == topk",
    "ckv_cache.shape[1] == page_size"
  ],
  "inputs": {
    "q_nope": {
      "shape": [
        "num_tokens",
        "num_qo_heads",
        "head_dim_ckv"
      ],
      "dtype": "bfloat16",
      "description": "Query tensor without positional encoding component."
    },
    "q_pe": {
      "shape": [
        "num_tokens",
        "num_qo_heads",
        "head_dim_kpe"
      ],
      "dtype": "bfloat16",
      "description": "Query positional encoding component."
    },
    "ckv_cache": {
      "shape": [
        "num_pages",
        "page_size",
        "head_dim_ckv"
      ],
      "dtype": "bfloat16",
      "description": "Compressed key-value cache with page_size=1."
    },
    "kpe_cache": {
      "shape": [
        "num_pages",
        "page_size",
        "head_dim_kpe"
      ],
      "dtype": "bfloat16",
      "description": "Key positional encoding cache."
    },
    "sparse_indices": {
      "shape": [
        "num_tokens",
        "topk"
      ],
      "dtype": "int32",
      "description": "Sparse indices selecting top-K KV cache entries for each token. Values of -1 indicate padding (invalid indices)."
    },
    "sm_scale": {
      "shape": null,
      "dtype": "float32",
      "description": "Softmax scale. For MLA, uses pre-absorption head dimension: 1/sqrt(head_dim_qk + head_dim_kpe) = 1/sqrt(128 + 64) = 1/sqrt(192)."
    }
  },
  "outputs": {
    "output": {
      "shape": [
        "num_tokens",
        "num_qo_heads",
        "head_dim_ckv"
      ],
      "dtype": "bfloat16"
    },
    "lse": {
      "shape": [
        "num_tokens",
        "num_qo_heads"
      ],
      "dtype": "float32",
      "description": "The 2-based log-sum-exp of attention logits."
    }
  },
  "reference": "import math\nimport torch\n\n\n@torch.no_grad()\ndef run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale):\n    num_tokens, num_qo_heads, head_dim_ckv = q_nope.shape\n    head_dim_kpe = q_pe.shape[-1]\n    page_size = ckv_cache.shape[1]\n    topk = sparse_indices.shape[-1]\n\n    # Check constants\n    assert num_qo_heads == 16\n    assert head_dim_ckv == 512\n    assert head_dim_kpe == 64\n    assert page_size == 1\n    assert topk == 2048\n\n    # Check constraints\n    assert sparse_indices.shape[0] == num_tokens\n    assert sparse_indices.shape[-1] == topk\n    assert ckv_cache.shape[1] == page_size\n\n    device = q_nope.device\n\n    # Squeeze page dimension (page_size=1)\n    Kc_all = ckv_cache.squeeze(1).to(torch.float32)  # [num_pages, head_dim_ckv]\n    Kp_all = kpe_cache.squeeze(1).to(torch.float32)  # [num_pages, head_dim_kpe]\n\n    output = torch.zeros(\n        (num_tokens, num_qo_heads, head_dim_ckv), dtype=torch.bfloat16, device=device\n    )\n    lse = torch.full((num_tokens, num_qo_heads), -float(\"inf\"), dtype=torch.float32, device=device)\n\n    for t in range(num_tokens):\n        indices = sparse_indices[t]  # [topk]\n\n        # Handle padding: -1 indicates invalid indices\n        valid_mask = indices != -1\n        valid_indices = indices[valid_mask]\n\n        if valid_indices.numel() == 0:\n            output[t].zero_()\n            continue\n\n        tok_idx = valid_indices.to(torch.long)\n\n        Kc = Kc_all[tok_idx]  # [num_valid, head_dim_ckv]\n        Kp = Kp_all[tok_idx]  # [num_valid, head_dim_kpe]\n        qn = q_nope[t].to(torch.float32)  # [num_qo_heads, head_dim_ckv]\n        qp = q_pe[t].to(torch.float32)  # [num_qo_heads, head_dim_kpe]\n\n        # Compute attention logits\n        logits = (qn @ Kc.T) + (qp @ Kp.T)  # [num_qo_heads, num_valid]\n        logits_scaled = logits * sm_scale\n\n        # Compute 2-base LSE\n        lse[t] = torch.logsumexp(logits_scaled, dim=-1) / math.log(2.0)\n\n        # Compute attention output\n        attn = torch.softmax(logits_scaled, dim=-1)  # [num_qo_heads, num_valid]\n        out = attn @ Kc  # [num_qo_heads, head_dim_ckv]\n        output[t] = out.to(torch.bfloat16)\n\n    return output, lse"
}
"""  # noqa: E501
UPSTREAM_DSA_NAME = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps1"
RANDOM = {"type": "random"}


def _dsa_dataset(root, definition_text, axes_list, blob_indices=()):
    """A FlashInfer Trace dataset: the definition and one workload per axes, its inputs
    random, but sparse_indices a safetensors file for the workloads in ``blob_indices``."""
    definition = root / "definitions" / "dsa_paged" / f"{UPSTREAM_DSA_NAME}.json"
    definition.parent.mkdir(parents=True)
    definition.write_text(definition_text)
    lines = []
    for index, axes in enumerate(axes_list):
        inputs = {
            **{name: RANDOM for name in ("q_nope", "q_pe", "ckv_cache", "kpe_cache")},
            "sparse_indices": RANDOM,
            "sm_scale": {"type": "scalar", "value": 0.0721687836},
        }
        if index in blob_indices:
            path = f"blob/workloads/dsa_paged/dsa-{index}.safetensors"
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            indices = torch.zeros(axes["num_tokens"], 2048, dtype=torch.int32)
            save_file({"sparse_indices": indices}, root / path)
            inputs["sparse_indices"] = {
                "type": "safetensors",
                "path": path,
                "tensor_key": "sparse_indices",
            }
        workload = {"uuid": f"dsa-{index}", "axes": axes, "inputs": inputs}
        record = {"definition": UPSTREAM_DSA_NAME, "solution": None, "workload": workload}
        lines.append(json.dumps({**record, "evaluation": None}))
    workloads = root / "workloads" / "dsa_paged" / f"{UPSTREAM_DSA_NAME}.jsonl"
    workloads.parent.mkdir(parents=True)
    workloads.write_text("\n".join(lines) + "\n")
    return load_dataset(root)


def test_check_accepts_an_upstream_definition_with_shape_constraints(tmp_path):
    data = json.loads(UPSTREAM_DSA_DEFINITION)
    assert [c for c in data["constraints"] if ".shape[" in c] == data["constraints"]
    dataset = _dsa_dataset(tmp_path, UPSTREAM_DSA_DEFINITION, [{"num_tokens": 3, "num_pages": 9}])
    assert dataset.problems == []
    report = check_dataset(dataset)
    assert report.problems == [], [str(p) for p in report.problems]
    assert report.counts["definitions"] == 1 and report.counts["workloads"] == 1


def test_check_evaluates_shape_constraints_from_the_axes_without_tensors(tmp_path):
    """A shape constraint of the upstream kind that a workload's axes violate is reported
    by check before any tensor exists (the inputs are random: nothing to load)."""
    data = json.loads(UPSTREAM_DSA_DEFINITION)
    data["constraints"].append("ckv_cache.shape[0] >= sparse_indices.shape[0]")
    axes = [{"num_tokens": n, "num_pages": 9} for n in (3, 12, 12)]
    # dsa-2's sparse_indices is a file: its blob is verified, and the violation is
    # still reported once, not once from the axes and again from the loaded tensor.
    dataset = _dsa_dataset(tmp_path, json.dumps(data), axes, blob_indices={2})
    report = check_dataset(dataset)
    assert report.counts["blobs_verified"] == 1
    assert [str(p) for p in report.problems] == [
        f"workloads/dsa_paged/{UPSTREAM_DSA_NAME}.jsonl: workload dsa-{index}: "
        "violates 'ckv_cache.shape[0] >= sparse_indices.shape[0]'"
        for index in (1, 2)
    ]
