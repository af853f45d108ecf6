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
    found = _work(dataset, "sparse_mla_prefill_h64_d512_k128", {"M": 2, "Nkv": 4}, inputs)
    assert found.flops == 3 * 64 * (2 * 512 + 2 * 512) == 393_216
    q_and_output = 2 * (2 * 64 * 512 * 2)
    rows = 2 * 512 * 2
    small = 2 * 128 * 4 + 2 * 4 + 64 * 4 + 4  # indices, lengths, sinks, scale
    assert found.bytes == q_and_output + rows + small == 265_484


def test_every_bundled_roofline_loads_and_counts_its_first_workload(dataset):
    assert not [p for p in dataset.problems if p.file.startswith("rooflines/")]
    for name, roofline in dataset.rooflines.items():
        if roofline.let:  # reads inputs: the sparse MLA test above
            continue
        first = dataset.workloads[name][0]
        found = _work(dataset, name, first.axes)
        assert found.flops > 0 and found.bytes > 0, name


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
