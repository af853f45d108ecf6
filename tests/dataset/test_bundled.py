"""The bundled dataset is the seed system's (names, inputs, axes, tolerances, dev sets), plus
a corner of real MiniLM captures."""

import json
from pathlib import Path

import pytest

BUNDLED = Path(__file__).resolve().parents[2] / "dataset"
INTERFACES = json.loads((BUNDLED / "docs/interface-audit/interfaces.json").read_text())
BF16 = {"atol": 0.005, "rtol": 0.016}
FP32 = {"atol": 2e-05, "rtol": 0.0001}
MINILM = {
    "dense_gemm_bf16_nt_bias_n384_k384",
    "dense_gemm_bf16_nt_bias_n1536_k384",
    "dense_gemm_bf16_nt_bias_n384_k1536",
    "noncausal_dense_attention_h12_d32",
}


def test_every_definition_has_the_seed_name_and_input_order(bundled):
    recorded = {entry["definition"]: entry["inputs"] for entry in INTERFACES["definitions"]}
    assert len(recorded) == 21
    seed = {n: list(d.inputs) for n, d in bundled.definitions.items() if n not in MINILM}
    assert seed == recorded


def test_seed_op_types_and_folders(bundled):
    assert (
        bundled.definitions["prefix_cached_block_causal_h32_d128"].op_type
        == "block_causal_attention"
    )
    assert bundled.definitions["noncausal_dense_attention_h32_d64"].op_type == "dense_attention"
    for name, path in bundled.definition_files.items():
        assert path.parent.name == bundled.definitions[name].op_type


def test_var_axes_are_exactly_the_captured_axes(bundled):
    for uuid, record in bundled.captures.items():
        definition = bundled.definitions[record.definition]
        assert sorted(definition.var_axes()) == sorted(record.axes), uuid


def test_workload_counts_per_model_match_the_seed(bundled):
    counts = {name: len(ws) for name, ws in bundled.workloads.items() if name not in MINILM}
    assert sum(counts.values()) == 1104
    assert counts["qsa_index_topk_decode_qwen38_h4_d128_topk512_c4"] == 192
    assert counts["gdn_prefill_qk4_v8_d128_k_last"] + counts["gdn_decode_qk4_v8_d128_k_last"] == 154
    ltx = [n for n in counts if n.startswith(("neighborhood_", "noncausal_"))]
    assert sum(counts[n] for n in ltx) == 207


@pytest.mark.parametrize(
    "name, tolerance",
    [
        ("dense_gemm_bf16_nt_n4096_k4096", BF16),
        ("noncausal_dense_attention_h32_d128", {**BF16, "required_matched_ratio": 0.9999}),
        ("noncausal_dense_attention_h32_d64", {**BF16, "required_matched_ratio": 0.9999}),
        (
            "gdn_decode_qk4_v8_d128_k_last",
            {"atol": 0.01, "rtol": 0.01, "comparison": "absolute_or_relative"},
        ),
        (
            "gdn_prefill_qk4_v8_d128_k_last",
            {"atol": 0.01, "rtol": 0.01, "comparison": "absolute_or_relative"},
        ),
        (
            # the seed's numbers; the ambiguity is ours (December 1): any FP32 summation order
            # may route a token whose top-6 cut is within them either way
            "moe_router_gemm_topk_deepseek41_d5120_e384_topk6",
            {
                **FP32,
                "ambiguity": {
                    "function": "ambiguous_rows",
                    "outputs": ["expert_ids", "expert_weights"],
                    "accept": "valid_routing",  # those tokens must still be a valid routing
                },
            },
        ),
        (
            # the seed's exact ids; the ambiguity is ours (December 2): another FP32 summation
            # order may move a score across the top-512 cut by up to its rounding bound
            "qsa_index_topk_decode_qwen38_h4_d128_topk512_c4",
            {
                "atol": 0.0,
                "rtol": 0.0,
                "ambiguity": {
                    "function": "ambiguous_rows",
                    "outputs": ["block_ids"],
                    "accept": "valid_selection",  # those rows must still be a valid top-512
                },
            },
        ),
        ("mixed_mla_decode_deepseek41_h64_d512_k8128_k4512", BF16),
    ],
)
def test_task_tolerances_are_the_seeds(bundled, name, tolerance):
    assert bundled.tasks[name].tolerance.model_dump(exclude_none=True) == tolerance


def test_dev_sets_have_at_most_ten_distinct_resolving_uuids(bundled):
    for name, task in bundled.tasks.items():
        uuids = {w.uuid for w in bundled.workloads[name]}
        assert 1 <= len(task.dev) <= 10 and len(set(task.dev)) == len(task.dev)
        assert set(task.dev) <= uuids


def test_scalar_inputs_carry_documented_values(bundled):
    expected = {"scale": 0.08838834764831843, "sm_scale": 512**-0.5, "routed_scale": 1.5}
    for name, definition in bundled.definitions.items():
        for input_name, spec in definition.inputs.items():
            if spec.shape is None:
                values = {w.inputs[input_name].value for w in bundled.workloads[name]}
                assert values == {expected[input_name]}, (name, input_name)


def test_the_minilm_corner_is_captured_data_with_engine_outputs(bundled):
    assert MINILM <= set(bundled.definitions)
    for name in MINILM:
        workloads = bundled.workloads[name]
        assert len(workloads) >= 6
        for workload in workloads:
            assert {d.type for d in workload.inputs.values()} == {"safetensors"}
            record = bundled.captures[workload.uuid]
            assert record.model_extra["model"] == "sentence-transformers/all-MiniLM-L6-v2"
            assert record.model_extra["expected_output"]["type"] == "safetensors"
