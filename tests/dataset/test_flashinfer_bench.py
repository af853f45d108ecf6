"""A dataset written in flashinfer-bench's FlashInfer Trace layout loads and materializes.

The fixtures are ours, written in that format: definitions with scalar and optional
inputs, workload lines with random, scalar and safetensors inputs (several tensors in
one file named by workload, './' paths, dash-less uuids), a result trace line, and a
solution that relies on flashinfer-bench's defaults.
"""

import json
import shutil

import pytest
import torch
from safetensors.torch import save_file

from inference_kernels.dataset.check import check_dataset
from inference_kernels.dataset.layout import load_dataset
from inference_kernels.materialize.inputs import materialize
from inference_kernels.materialize.references import run_reference

GEMM = {
    "name": "gemm_n128_k256",
    "description": "General matrix multiply (GEMM) C = A @ B.T.",
    "op_type": "gemm",
    "tags": ["status:verified", "model:qwen3-30b-a3b"],
    "axes": {
        "M": {"type": "var"},
        "N": {"type": "const", "value": 128},
        "K": {"type": "const", "value": 256},
    },
    "inputs": {
        "A": {"shape": ["M", "K"], "dtype": "float16"},
        "B": {"shape": ["N", "K"], "dtype": "float16"},
    },
    "outputs": {"C": {"shape": ["M", "N"], "dtype": "float16"}},
    "reference": "import torch\n\ndef run(A, B):\n    C = torch.matmul(A, B.T)\n    return C",
}
SCALED = {
    "name": "scaled_add_h8",
    "op_type": "elementwise",
    "description": "out = alpha * x + y (+ bias when given).",
    "axes": {
        "batch_size": {"type": "var", "description": "Rows."},
        "hidden_size": {"type": "const", "value": 8},
    },
    "inputs": {
        "x": {"shape": ["batch_size", "hidden_size"], "dtype": "float32"},
        "y": {"shape": ["batch_size", "hidden_size"], "dtype": "float32", "description": "Addend."},
        "bias": {"shape": ["hidden_size"], "dtype": "float32", "optional": True},
        "alpha": {"shape": None, "dtype": "float32"},
    },
    "outputs": {"out": {"shape": ["batch_size", "hidden_size"], "dtype": "float32"}},
    "constraints": ["batch_size >= 1"],
    "reference": (
        "import torch\n\n@torch.no_grad()\ndef run(x, y, bias, alpha):\n"
        "    out = alpha * x + y\n    return out if bias is None else out + bias\n"
    ),
}
SOLUTION = {
    "name": "gemm_cuda_example",
    "definition": "gemm_n128_k256",
    "author": "agent",
    "spec": {
        "language": "cuda",
        "target_hardware": ["B200"],
        "entry_point": "kernel.cu::gemm",
        "dependencies": [],
    },
    "sources": [
        {"path": "kernel.h", "content": "#pragma once\n"},
        {"path": "kernel.cu", "content": "// kernel\n"},
    ],
}


def line(definition, uuid, axes, inputs, **extra):
    workload = {"uuid": uuid, "axes": axes, "inputs": inputs}
    return json.dumps(
        {
            "definition": definition,
            "solution": extra.get("solution"),
            "workload": workload,
            "evaluation": extra.get("evaluation"),
        }
    )


@pytest.fixture
def fib_root(tmp_path):
    root = tmp_path / "flashinfer_trace"
    for definition in (GEMM, SCALED):
        path = root / "definitions" / definition["op_type"] / f"{definition['name']}.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(definition, indent=4))
    (root / "solutions/gemm").mkdir(parents=True)
    (root / "solutions/gemm/gemm_cuda_example.json").write_text(json.dumps(SOLUTION))
    blob = "./blob/workloads/elementwise/scaled_add_h8/scaled_add_h8_0a1b2c.safetensors"
    (root / blob).parent.mkdir(parents=True)
    y = torch.arange(24, dtype=torch.float32).reshape(3, 8)
    save_file({"y": y, "unused": torch.zeros(1)}, root / blob)
    evaluation = {
        "status": "PASSED",
        "environment": {"hardware": "NVIDIA H200", "libs": {}},
        "timestamp": "2026-03-17T14:19:52",
        "log": "",
        "correctness": {"max_relative_error": 0.0, "max_absolute_error": 0.0, "extra": None},
        "performance": {"latency_ms": 0.09, "reference_latency_ms": 0.02, "speedup_factor": 0.2},
    }
    (root / "workloads/gemm").mkdir(parents=True)
    (root / "workloads/gemm/gemm_n128_k256.jsonl").write_text(
        "\n".join(
            [
                line(
                    "gemm_n128_k256",
                    "bcc2cc41b7464e54b0c4d11e65da96d8",
                    {"M": 6},
                    {"A": {"type": "random"}, "B": {"type": "random"}},
                ),
                line(
                    "gemm_n128_k256",
                    "6ba7c7de-dc5a-48d2-8ada-1382feb5ceac",
                    {"M": 2},
                    {"A": {"type": "random"}, "B": {"type": "random"}},
                    solution="gemm_cuda_example",
                    evaluation=evaluation,
                ),
            ]
        )
        + "\n"
    )
    (root / "workloads/elementwise").mkdir(parents=True)
    (root / "workloads/elementwise/scaled_add_h8.jsonl").write_text(
        line(
            "scaled_add_h8",
            "ebf7188b-4b31-4746-b57b-fa25b53f5e3e",
            {"batch_size": 3},
            {
                "x": {"type": "random"},
                "y": {"type": "safetensors", "path": blob, "tensor_key": "y"},
                "alpha": {"type": "scalar", "value": 0.5},
            },
        )
        + "\n"
    )
    return root


def test_peer_dataset_loads_and_checks_clean(fib_root):
    dataset = load_dataset(fib_root)
    assert dataset.problems == []
    assert set(dataset.definitions) == {"gemm_n128_k256", "scaled_add_h8"}
    assert dataset.definitions["scaled_add_h8"].inputs["bias"].optional is True
    assert dataset.solutions["gemm_cuda_example"].spec.destination_passing_style is True
    assert len(dataset.workloads["gemm_n128_k256"]) == 2
    report = check_dataset(dataset)
    assert report.problems == []
    assert report.counts["blobs_verified"] == 1


def test_peer_workloads_materialize_with_every_descriptor_kind(fib_root):
    dataset = load_dataset(fib_root)
    definition = dataset.definitions["scaled_add_h8"]
    (workload,) = dataset.workloads["scaled_add_h8"]
    made = materialize(definition, workload, data_root=fib_root)
    x, y, bias, alpha = made.values
    assert made.origins == {"x": "stand-in", "y": "captured", "bias": "scalar", "alpha": "scalar"}
    assert made.origin == "mixed" and made.generator == "generic.generic"
    assert bias is None and alpha == 0.5
    assert torch.equal(y, torch.arange(24, dtype=torch.float32).reshape(3, 8))
    (out,) = run_reference(definition, made.values)
    assert torch.allclose(out, 0.5 * x + y)


def test_peer_keys_outside_the_schema_are_reported_but_load(fib_root):
    path = fib_root / "definitions/gemm/gemm_n128_k256.json"
    data = json.loads(path.read_text())
    data["inputs"]["A"]["layout"] = "row_major"
    data["provenance"] = {"tool": "x"}
    path.write_text(json.dumps(data))
    dataset = load_dataset(fib_root)
    fields = sorted(p.field for p in dataset.problems)
    assert fields == ["inputs.A.layout", "provenance"]
    assert all(p.message == "unknown key" for p in dataset.problems)
    assert "gemm_n128_k256" in dataset.definitions  # still usable
    workload = dataset.workloads["gemm_n128_k256"][0]
    made = materialize(dataset.definitions["gemm_n128_k256"], workload, data_root=fib_root)
    assert [tuple(v.shape) for v in made.values] == [(6, 256), (128, 256)]


def test_a_broken_peer_file_is_reported_not_raised(fib_root):
    path = fib_root / "definitions/gemm/gemm_n128_k256.json"
    path.write_text(path.read_text().replace('"float16"', '"float128"', 1))
    shutil.copy(path, fib_root / "definitions/gemm/copy.json")
    dataset = load_dataset(fib_root)
    assert "gemm_n128_k256" not in dataset.definitions
    assert any("unknown dtype 'float128'" in p.message for p in dataset.problems)
    report = check_dataset(dataset)
    assert any(p.field == "definition" and "no definition" in p.message for p in report.problems)
