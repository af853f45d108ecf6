"""The least work of a workload (dataset/rooflines.py), held to counts done by hand: a
dense GEMM, a dense attention, and the sparse MLA prefill on indices chosen so that
every rule (topk_length, a negative index, one past Nkv, a row named twice) counts."""

import json
from pathlib import Path

import pytest
import torch

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.dataset.rooflines import Work, work

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dataset():
    return load_dataset(ROOT / "dataset")


def _work(dataset, name: str, axes: dict[str, int], inputs=None) -> Work:
    definition = dataset.definitions[name]
    return work(dataset.rooflines[name], definition, definition.const_axes() | axes, inputs)


def test_a_gemm_with_bias_by_hand(dataset):
    # C[100, 384] = A[100, 384] @ W[384, 384]^T + bias[384], bf16
    found = _work(dataset, "dense_gemm_bf16_nt_bias_n384_k384", {"M": 100})
    assert found.flops == 2 * 100 * 384 * 384 + 100 * 384 == 29_529_600
    assert found.bytes == 2 * (100 * 384 + 384 * 384 + 384 + 100 * 384) == 449_280


def test_the_largest_gemm_is_the_one_measured_at_788_tflops(dataset):
    # ../shared/GPU.md: F.linear M4096 N12288 K4096 in 523 us, 788 TFLOP/s
    found = _work(dataset, "dense_gemm_bf16_nt_n12288_k4096", {"M": 4096})
    assert found.flops == 412_316_860_416
    assert round(found.flops / 523e-6 / 1e12) == 788


def test_a_dense_attention_by_hand(dataset):
    # Q[1, 126, 32, 64], K and V [1, 2560, 32, 64], output like Q; bf16
    found = _work(dataset, "noncausal_dense_attention_h32_d64", {"B": 1, "Nq": 126, "Nk": 2560})
    assert found.flops == 2 * 2 * 126 * 2560 * 32 * 64 == 2_642_411_520
    assert found.bytes == 2 * (2 * 126 * 32 * 64 + 2 * 2560 * 32 * 64) == 22_003_712


def test_the_sparse_mla_prefill_counts_only_what_its_indices_keep(dataset):
    # H64 D512 KVH1 TOPK128. Query 0 keeps slots t < 3: rows 0, 7 (past Nkv = 4: skipped)
    # and -1 (skipped); the 5s after its length do not count. Query 1 keeps t < 2: row 1
    # twice. Three (query, slot) pairs are computed, for every one of the 64 heads; rows 0
    # and 1 are read.
    indices = torch.full((2, 1, 128), 5, dtype=torch.int32)
    indices[0, 0, :3] = torch.tensor([0, 7, -1])
    indices[1, 0, :2] = torch.tensor([1, 1])
    inputs = {"indices": indices, "topk_length": torch.tensor([3, 2], dtype=torch.int32)}
    # The inputs no expression reads are left where they are (the referee's are on the GPU,
    # gigabytes of them): a meta tensor would raise if it were moved or read.
    inputs["KV"] = torch.empty(4, 1, 512, device="meta")
    found = _work(dataset, "sparse_mla_prefill_h64_d512_k128", {"M": 2, "Nkv": 4}, inputs)
    assert found.flops == 3 * 64 * (2 * 512 + 2 * 512) == 393_216
    q_and_output = 2 * (2 * 64 * 512 * 2)
    rows = 2 * 512 * 2
    small = 2 * 128 * 4 + 2 * 4 + 64 * 4 + 4  # indices, lengths, sinks, scale
    assert found.bytes == q_and_output + rows + small == 265_484


def test_the_qsa_decode_counts_the_tokens_of_valid_blocks_and_the_tail(dataset):
    # Row 0: context 10, blocks 0 and 1 (tokens 0-7) and the tail 8, 9: 10 tokens.
    # Row 1: context 8, block 1 only (-1 pads), no tail: 4 tokens.
    block_ids = torch.full((2, 512), -1, dtype=torch.int32)
    block_ids[0, :2] = torch.tensor([0, 1])
    block_ids[1, 0] = 1
    inputs = {"block_ids": block_ids, "context_lens": torch.tensor([10, 8], dtype=torch.int32)}
    axes = {"B": 2, "MP": 1, "NP": 1, "P": 64}
    name = "qsa_sparse_gqa_decode_qwen38_h24_kv2_d256_topk512_c4"
    found = _work(dataset, name, axes, inputs)
    assert found.flops == 14 * 24 * (2 * 256 + 2 * 256) == 344_064
    q_and_output = 2 * (2 * 24 * 256 * 2)
    k_and_v = 14 * 2 * (2 * 256 * 2)  # both KV heads
    small = 2 * 1 * 4 + 2 * 512 * 4 + 2 * 4  # page table, block ids, lengths
    assert found.bytes == q_and_output + k_and_v + small == 81_936


def test_the_qsa_indexer_scores_nothing_when_a_row_has_topk_blocks_or_fewer(dataset):
    name = "qsa_index_topk_decode_qwen38_h4_d128_topk512_c4"
    axes = {"B": 2, "MP": 40, "NP": 40, "P": 16}
    counts = {"num_complete_blocks": torch.tensor([512, 600], dtype=torch.int32)}
    found = _work(dataset, name, axes, counts)
    assert found.flops == 600 * 4 * 2 * 128  # row 1 only: 600 blocks, 4 heads
    one = _work(dataset, name, {**axes, "B": 1}, {"num_complete_blocks": torch.tensor([512])})
    assert one.flops == 0 and one.bytes > 0  # its bound is an empty kernel's time


def test_the_grouped_gemm_reads_the_weights_of_the_experts_it_uses_once(dataset):
    name = "grouped_gemm_fp8_fp4_e384_n5120_k2304_g32"
    inputs = {"expert_id": torch.tensor([3, 3, 7, 200], dtype=torch.int32)}
    found = _work(dataset, name, {"M": 4}, inputs)
    assert found.flops == 2 * 4 * 5120 * 2304
    weights = 3 * 5120 * (1152 + 72)  # three experts: packed FP4 and UE8M0 scales
    rows = 4 * 2304 + 4 * 72 + 4 * 4 + 2 * 4 * 5120  # FP8 rows, row scales, ids, output
    assert found.bytes == weights + rows


def test_every_query_of_a_neighborhood_attention_sees_a_whole_window(dataset):
    name = "neighborhood_attention_3d_h8_d64_kt3_ky5_kx5"
    found = _work(dataset, name, {"B": 1, "T": 4, "Y": 6, "X": 8})
    assert found.flops == 4 * 1 * (4 * 6 * 8) * 8 * 64 * (3 * 5 * 5)
    assert found.bytes == 4 * (4 * 6 * 8 * 8 * 64) * 2  # Q, K, V, output, bf16


def test_every_bundled_definition_has_a_roofline_that_counts_its_smallest_workload(dataset):
    from inference_kernels.dataset.selection import input_bytes
    from inference_kernels.materialize.inputs import materialize

    assert not [p for p in dataset.problems if p.file.startswith("rooflines/")]
    assert set(dataset.rooflines) == set(dataset.definitions)
    for name, roofline in dataset.rooflines.items():
        definition = dataset.definitions[name]
        smallest = min(dataset.workloads[name], key=lambda w: input_bytes(definition, w))
        inputs = None
        if roofline.let:  # it reads input values
            if input_bytes(definition, smallest) > 200e6:
                continue  # the grouped GEMMs (GBs of weights): their test above
            made = materialize(definition, smallest, data_root=dataset.root, device="cpu")
            inputs = dict(zip(definition.inputs, made.values, strict=True))
        found = _work(dataset, name, smallest.axes, inputs)
        assert found.bytes > 0, name
        assert found.flops > 0 or name.startswith("qsa_index"), name


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"definition": "no_such_definition"}, "definition", "no definition named"),
        ({"flops": "2 * M * N * Q"}, "flops", "unknown name(s): Q"),
        ({"flops": "__import__('os')"}, "flops", "is not allowed"),
        ({"let": {"x": "open('/etc/passwd')"}}, "let.x", "function 'open' is not allowed"),
        ({"math": "int4"}, "math", "Input should be"),
    ],
)
def test_a_bad_roofline_file_is_a_problem_naming_its_field(tmp_path, change, field, message):
    root = tmp_path / "dataset"
    for part in ("definitions", "tasks", "solutions", "workloads"):
        (root / part).mkdir(parents=True)
    name = "dense_gemm_bf16_nt_n4096_k4096"
    (root / "definitions" / "gemm").mkdir()
    source = ROOT / "dataset" / "definitions" / "gemm" / f"{name}.json"
    (root / "definitions" / "gemm" / source.name).write_text(source.read_text())
    (root / "rooflines").mkdir()
    roofline = {"definition": name, "math": "bf16", "flops": "2 * M * N * K"} | change
    (root / "rooflines" / f"{name}.json").write_text(json.dumps(roofline))
    loaded = load_dataset(root)
    found = [p for p in loaded.problems if p.file == f"rooflines/{name}.json"]
    assert found and (found[0].field, message in found[0].message) == (field, True), found
    assert name not in loaded.rooflines


def _h200_like(**change):
    from inference_kernels.schema import Hardware

    figures = {
        "device": "NVIDIA H200",
        "tflops": {"bf16": 800.0, "fp8": 1600.0, "fp8xfp4": 1600.0, "fp32": 60.0},
        "memory_tb_s": 4.0,
        "empty_kernel_us": 2.0,
        "provenance": {"command": "made up for a test"},
    }
    return Hardware.model_validate(figures | change)


def test_the_speed_of_light_is_the_longest_of_compute_memory_and_one_launch(dataset):
    from inference_kernels.dataset.rooflines import speed_of_light

    device = _h200_like()
    gemm = _work(dataset, "dense_gemm_bf16_nt_n12288_k4096", {"M": 4096})
    limit = speed_of_light(gemm, "bf16", device)  # 412.3 GFLOP at 800 TFLOP/s
    assert limit.bound == "compute" and limit.us == pytest.approx(515.396, abs=1e-3)
    decode = _work(dataset, "gdn_decode_qk4_v8_d128_k_last", {"batch_size": 64})
    limit = speed_of_light(decode, "fp32", device)  # two fp32 states of 32 MiB at 4 TB/s
    assert limit.bound == "memory"
    assert limit.us == pytest.approx(decode.bytes / 4e6) and 16 < limit.us < 18
    tiny = _work(dataset, "dense_gemm_bf16_nt_bias_n384_k384", {"M": 5})
    assert speed_of_light(tiny, "bf16", device) == type(limit)(2.0, "launch")


def test_a_hardware_table_loads_by_device_and_a_bad_one_names_its_field(tmp_path):
    root = tmp_path / "dataset"
    (root / "hardware").mkdir(parents=True)
    (root / "hardware" / "h200.json").write_text(_h200_like().model_dump_json())
    bad = _h200_like().model_dump(mode="json") | {"device": "other", "memory_tb_s": -1}
    (root / "hardware" / "bad.json").write_text(json.dumps(bad))
    loaded = load_dataset(root)
    assert set(loaded.hardware) == {"NVIDIA H200"}
    assert loaded.hardware["NVIDIA H200"].tflops["bf16"] == 800.0
    found = [(p.file, p.field) for p in loaded.problems if p.file.startswith("hardware/")]
    assert found == [("hardware/bad.json", "memory_tb_s")]
