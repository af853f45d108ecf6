import json

import torch
from typer.testing import CliRunner

from inference_kernels.cli import app
from inference_kernels.dataset.check import check_dataset
from inference_kernels.dataset.layout import load_dataset

runner = CliRunner()
GEMM = "definitions/gemm/dense_gemm_bf16_nt_n4096_k4096.json"
QSA = "qsa_index_topk_decode_qwen38_h4_d128_topk512_c4"


def edit_json(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def run_check(root):
    result = runner.invoke(app, ["check", "--dataset", str(root)])
    return result.exit_code, result.output


def test_bundled_dataset_passes_with_the_seed_counts_and_the_minilm_captures(bundled):
    report = check_dataset(bundled)
    assert report.problems == []
    assert report.counts["definitions"] == 21 + 4
    assert report.counts["tasks"] == 21 + 4
    assert report.counts["workloads"] == 1104 + 25
    assert report.counts["captures"] == 1104 + 25
    assert report.counts["blobs_verified"] == 75  # MiniLM inputs: hash, shape, dtype


def test_check_command_exits_zero_and_prints_counts(dataset_copy):
    code, output = run_check(dataset_copy)
    assert code == 0, output
    assert "25 definitions, 25 tasks, 1129 workloads, 1129 captures" in output


def test_unknown_key_names_file_and_key(dataset_copy):
    edit_json(dataset_copy / GEMM, lambda d: d["inputs"]["A"].update(layout="row"))
    code, output = run_check(dataset_copy)
    assert code == 1
    assert f"{GEMM}: inputs.A.layout: unknown key" in output


def test_bad_dtype_is_reported(dataset_copy):
    edit_json(dataset_copy / GEMM, lambda d: d["inputs"]["W"].update(dtype="bf16"))
    code, output = run_check(dataset_copy)
    assert code == 1
    assert f"{GEMM}: inputs.W.dtype" in output and "unknown dtype 'bf16'" in output


def test_reference_with_wrong_signature(dataset_copy):
    def swap(data):
        data["reference"] = data["reference"].replace("def run(A, W):", "def run(W, A):")

    edit_json(dataset_copy / GEMM, swap)
    code, output = run_check(dataset_copy)
    assert code == 1
    assert f"{GEMM}: reference: run takes (W, A), inputs are (A, W)" in output


def test_dev_uuid_that_does_not_resolve(dataset_copy):
    path = dataset_copy / "tasks" / f"{QSA}.json"
    edit_json(path, lambda d: d["dev"].__setitem__(0, "00000000-0000-0000-0000-000000000000"))
    code, output = run_check(dataset_copy)
    assert code == 1
    assert f"tasks/{QSA}.json: dev[0]: 00000000-0000-0000-0000-000000000000 is not one" in output


def test_an_ambiguity_names_a_function_of_the_reference_and_outputs_of_the_definition(
    dataset_copy,
):
    router = "moe_router_gemm_topk_deepseek41_d5120_e384_topk6"
    path = dataset_copy / "tasks" / f"{router}.json"

    def misname(data):
        data["tolerance"]["ambiguity"] = {
            "function": "ambiguous",
            "outputs": ["expert_idx"],
            "accept": "valid",
        }

    edit_json(path, misname)
    code, output = run_check(dataset_copy)
    assert code == 1
    file, output = f"tasks/{router}.json", " ".join(output.split())  # unwrapped
    assert f"{file}: tolerance.ambiguity.outputs[0]: 'expert_idx' is not an output" in output
    assert f"{file}: tolerance.ambiguity.function: {router}'s reference defines no" in output
    assert f"{file}: tolerance.ambiguity.accept: {router}'s reference defines no" in output


def test_more_than_ten_dev_uuids_is_a_schema_error(dataset_copy):
    path = dataset_copy / "tasks" / f"{QSA}.json"
    edit_json(path, lambda d: d["dev"].extend(["x"] * 5))
    code, output = run_check(dataset_copy)
    assert code == 1 and f"tasks/{QSA}.json: dev" in output


def test_axis_constraint_violation_and_missing_capture(dataset_copy):
    path = (
        dataset_copy / "workloads/block_causal_attention/prefix_cached_block_causal_h32_d128.jsonl"
    )
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[0]["workload"]["axes"]["Np"] = 0
    uuid = lines[0]["workload"]["uuid"]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    captures = dataset_copy / "captures.jsonl"
    kept = [line for line in captures.read_text().splitlines() if uuid not in line]
    captures.write_text("\n".join(kept) + "\n")
    report = check_dataset(load_dataset(dataset_copy))
    messages = [str(p) for p in report.problems]
    assert any(f"workload {uuid}: violates 'Np >= 1'" in m for m in messages)
    assert any(
        f"uuid {uuid}: workload of prefix_cached_block_causal_h32_d128 has no capture" in m
        for m in messages
    )


def test_invalid_json_line_is_reported_with_its_line_number(dataset_copy):
    path = dataset_copy / f"workloads/qsa_index/{QSA}.jsonl"
    path.write_text(path.read_text() + "{not json\n")
    report = check_dataset(load_dataset(dataset_copy))
    assert any(p.field == "line 193" and "invalid JSON" in p.message for p in report.problems)


def test_blob_hash_shape_and_dtype_are_verified(dataset_copy, tmp_path):
    exported = tmp_path / "exported"
    result = runner.invoke(
        app, ["materialize", "--dataset", str(dataset_copy), "-d", QSA, "-o", str(exported)]
    )
    assert result.exit_code == 0, result.output
    code, output = run_check(exported)
    assert code == 0, output
    assert "4 blobs_verified" in output
    # Replace one blob's tensor but keep its name: the content no longer matches the hash.
    from safetensors.torch import load_file, save_file

    blob = max(
        (exported / "blob/workloads" / QSA).glob("*.safetensors"), key=lambda p: p.stat().st_size
    )
    tensor = load_file(blob)["tensor"]
    save_file({"tensor": tensor + 1 if tensor.dtype != torch.bool else ~tensor}, blob)
    code, output = run_check(exported)
    assert code == 1
    assert f"blob/workloads/{QSA}/{blob.name}" in output and "differs from its name" in output
    save_file({"tensor": tensor.reshape(-1)[:1].clone()}, blob)
    code, output = run_check(exported)
    assert code == 1 and "declared" in output


def test_missing_dataset_is_a_one_line_error(tmp_path):
    result = runner.invoke(app, ["check", "--dataset", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "dataset root is not a directory" in result.output
    assert "Traceback" not in result.output
