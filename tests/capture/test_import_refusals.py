"""`inference-kernels import CAPTURE --into DATASET` refuses, changing nothing, a capture
that fails `check` and a capture whose definition has the name of one of the dataset's but
other content; a valid capture merges.

The command runs in a subprocess, as a user runs it, so that its exit code and everything
it prints (a traceback included) are what is asserted on. The dataset is a copy of the
bundled one; captures are written with the capture writer from a few small BF16 GEMMs.
"""

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from inference_kernels.capture import generic
from inference_kernels.capture.writer import CaptureWriter
from inference_kernels.dataset.check import check_dataset
from inference_kernels.dataset.layout import load_dataset

CONTEXT = {"model": "test/tiny", "model_revision": "r1", "engine": "pytest"}
NEW = generic.gemm_name(8, 16, bias=False)  # not in the bundled dataset
BUNDLED_GEMM = generic.gemm_name(384, 384, bias=True)  # MiniLM's, in the bundled dataset


def _capture(root, n, k, bias, tags=("status:test",)):
    """A complete capture directory: two GEMM workloads of one definition, its task and
    baseline."""
    writer = CaptureWriter(root, CONTEXT)
    definition = generic.gemm_definition(n, k, bias=bias, tags=list(tags))
    writer.define(definition)
    generator = torch.Generator().manual_seed(0)
    for rows in (2, 3):
        inputs = {
            "A": torch.randn(rows, k, generator=generator).bfloat16(),
            "W": torch.randn(n, k, generator=generator).bfloat16(),
        }
        if bias:
            inputs["bias"] = torch.randn(n, generator=generator).bfloat16()
        output = F.linear(inputs["A"], inputs["W"], inputs.get("bias"))
        writer.write(definition.name, inputs, {"C": output}, {"variant": f"rows_{rows}"})
    generic.write_tasks_and_baselines(root, writer.definitions.values())
    return root


def _import(capture, dataset):
    result = subprocess.run(
        [sys.executable, "-m", "inference_kernels.cli", "import", str(capture), "--into"]
        + [str(dataset)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "80"},
    )
    return result.returncode, result.stdout + result.stderr


def _snapshot(root):
    """Every file under ``root`` and the hash of its bytes."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _assert_refused(code, output, *expected):
    assert code != 0, output
    assert "Traceback" not in output, output
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith("error: "), output
    for text in expected:
        assert text in lines[0], output


def test_a_valid_capture_merges(tmp_path, dataset_copy):
    """The positive control: the command can succeed, so the refusals below are refusals."""
    capture = _capture(tmp_path / "capture", 8, 16, bias=False)
    before = _snapshot(dataset_copy)
    code, output = _import(capture, dataset_copy)
    assert code == 0, output
    assert "Traceback" not in output
    assert "definitions added: 1" in output and "workloads added: 2" in output
    after = _snapshot(dataset_copy)
    assert f"definitions/gemm/{NEW}.json" in after
    assert f"tasks/{NEW}.json" in after
    assert after["captures.jsonl"] != before["captures.jsonl"]
    assert {k: v for k, v in after.items() if k in before and k != "captures.jsonl"} == {
        k: v for k, v in before.items() if k != "captures.jsonl"
    }  # nothing that was there changed, but for the appended receipts
    merged = load_dataset(dataset_copy)
    assert len(merged.workloads[NEW]) == 2
    assert check_dataset(merged).problems == []


def _cut_a_blob(capture):
    blob = sorted((capture / "blob").rglob("*.safetensors"))[0]
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF  # one tensor byte: the content no longer matches the hash in its name
    blob.write_bytes(bytes(data))
    return (str(blob.relative_to(capture)), "content hash")


def _edit_axes(capture):
    path = capture / "workloads" / "gemm" / f"{NEW}.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[0]["workload"]["axes"]["M"] += 5  # its blobs have the rows of the call
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return (f"workloads/gemm/{NEW}.jsonl", "declared")


@pytest.mark.parametrize("damage", [_cut_a_blob, _edit_axes])
def test_a_capture_that_fails_check_is_refused_and_the_dataset_is_unchanged(
    tmp_path, dataset_copy, damage
):
    capture = _capture(tmp_path / "capture", 8, 16, bias=False)
    symptoms = damage(capture)
    assert not check_dataset(load_dataset(capture)).ok
    before = _snapshot(dataset_copy)
    code, output = _import(capture, dataset_copy)
    _assert_refused(code, output, str(capture), "check problem", *symptoms)
    assert _snapshot(dataset_copy) == before


def test_a_definition_that_differs_from_the_datasets_is_refused_and_the_dataset_is_unchanged(
    tmp_path, dataset_copy
):
    """The capture defines MiniLM's biased 384x384 GEMM, as the bundled dataset does, but
    with other tags: the import would leave workloads judged under a definition they were
    not captured for."""
    capture = _capture(tmp_path / "capture", 384, 384, bias=True)
    assert check_dataset(load_dataset(capture)).ok  # the capture itself is sound
    mine = load_dataset(capture).definitions[BUNDLED_GEMM]
    theirs = load_dataset(dataset_copy).definitions[BUNDLED_GEMM]
    assert mine != theirs and mine.model_copy(update={"tags": theirs.tags}) == theirs
    before = _snapshot(dataset_copy)
    code, output = _import(capture, dataset_copy)
    _assert_refused(
        code, output, f"definitions/gemm/{BUNDLED_GEMM}.json", "differs from the capture's"
    )
    assert _snapshot(dataset_copy) == before
