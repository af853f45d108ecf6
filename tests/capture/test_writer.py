"""The capture writer: dedup, selection, budget, atomicity; the generic hooks; replay; import."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from inference_kernels.capture import generic
from inference_kernels.capture.torch_hooks import TorchHooks
from inference_kernels.capture.writer import CaptureError, CaptureWriter
from inference_kernels.dataset.check import check_dataset
from inference_kernels.dataset.layout import load_dataset
from inference_kernels.dataset.merge import merge
from inference_kernels.errors import DatasetError
from inference_kernels.materialize.reference_runs import run_case

GEMM = generic.gemm_name(8, 16, bias=False)
CONTEXT = {"model": "test/tiny", "model_revision": "r1", "engine": "pytest"}


def _writer(root, **options):
    writer = CaptureWriter(root, CONTEXT, **options)
    writer.define(generic.gemm_definition(8, 16, bias=False, tags=["status:test"]))
    return writer


def _gemm_call(rows: int, seed: int = 0, weight=None):
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(rows, 16, generator=generator).bfloat16()
    w = weight if weight is not None else torch.randn(8, 16, generator=generator).bfloat16()
    return {"A": a, "W": w}, {"C": F.linear(a, w)}


def _blobs(root):
    return sorted(p.name for p in (root / "blob").rglob("*.safetensors"))


def test_identical_tensors_share_one_blob_and_a_repeat_is_not_recorded(tmp_path):
    writer = _writer(tmp_path)
    weight = torch.ones(8, 16, dtype=torch.bfloat16)
    first_inputs, first_outputs = _gemm_call(2, seed=1, weight=weight)
    second_inputs, second_outputs = _gemm_call(3, seed=2, weight=weight)
    one = writer.write(GEMM, first_inputs, first_outputs, {"step": 0, "variant": "rows_2"})
    two = writer.write(GEMM, second_inputs, second_outputs, {"step": 0, "variant": "rows_3"})
    assert one != two
    assert len(_blobs(tmp_path)) == 5  # A, C of each call and the one shared weight
    again = _writer(tmp_path)  # a second run of the same capture
    assert again.write(GEMM, first_inputs, first_outputs, {"step": 0, "variant": "rows_2"}) == one
    assert again.counts == {"written": 0, "already_recorded": 1, "over_budget": 0}
    assert len((tmp_path / "captures.jsonl").read_text().splitlines()) == 2
    lines = (tmp_path / "workloads/gemm" / f"{GEMM}.jsonl").read_text().splitlines()
    assert [json.loads(line)["workload"]["axes"] for line in lines] == [{"M": 2}, {"M": 3}]


def test_selection_by_definition_step_key_and_budget(tmp_path):
    writer = _writer(tmp_path, enabled={GEMM}, steps={0, 2}, budget_bytes=1000)
    assert not writer.wants("other_definition", {"step": 0})
    assert not writer.wants(GEMM, {"step": 1})
    assert writer.wants(GEMM, {"step": 2, "variant": "rows_2"})
    inputs, outputs = _gemm_call(2)
    assert writer.write(GEMM, inputs, outputs, {"step": 2, "variant": "rows_2"})
    assert not writer.wants(GEMM, {"step": 0, "variant": "rows_2"})  # first call per key only
    assert writer.written_bytes == 2 * 16 * 2 + 8 * 16 * 2 + 2 * 8 * 2  # A, W, C in BF16
    big_inputs, big_outputs = _gemm_call(40)  # 40*16*2 + 256 + 40*8*2 bytes: over 1000
    assert writer.write(GEMM, big_inputs, big_outputs, {"step": 0, "variant": "rows_40"}) is None
    assert writer.counts["over_budget"] == 1 and writer.written_bytes == 352
    assert len((tmp_path / "captures.jsonl").read_text().splitlines()) == 1


def test_a_call_that_does_not_fit_the_definition_is_refused(tmp_path):
    writer = _writer(tmp_path)
    inputs, outputs = _gemm_call(2)
    with pytest.raises(CaptureError, match="dtype float32, declared bfloat16"):
        writer.write(GEMM, {**inputs, "A": inputs["A"].float()}, outputs, {})
    with pytest.raises(CaptureError, match="axis K is 4, elsewhere 16"):
        writer.write(GEMM, {**inputs, "A": inputs["A"][:, :4]}, outputs, {})
    with pytest.raises(CaptureError, match="unknown definition"):
        writer.write("nothing_like_it", inputs, outputs, {})


KILLED_CAPTURE = """
import os, signal, sys
import torch, torch.nn.functional as F
from inference_kernels.capture import generic
from inference_kernels.capture.writer import CaptureWriter
from inference_kernels.dataset import files as module

appended = []
original = module.append_line
def append(path, record, sort_keys=False):
    if path.name == "captures.jsonl" and len(appended) == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # the third workload line is written, its receipt not
    original(path, record, sort_keys)
    if path.name == "captures.jsonl":
        appended.append(record["uuid"])
module.append_line = append

writer = CaptureWriter(sys.argv[1], {"model": "test/tiny"})
writer.define(generic.gemm_definition(8, 16, bias=False, tags=["status:test"]))
for rows in range(1, 6):
    a = torch.ones(rows, 16, dtype=torch.bfloat16)
    w = torch.ones(8, 16, dtype=torch.bfloat16)
    writer.write(generic.gemm_name(8, 16, False), {"A": a, "W": w}, {"C": F.linear(a, w)},
                 {"step": rows, "variant": f"rows_{rows}"})
"""


def test_a_capture_killed_midway_leaves_no_half_written_record(tmp_path):
    script = tmp_path / "capture.py"
    script.write_text(textwrap.dedent(KILLED_CAPTURE))
    root = tmp_path / "capture"
    done = subprocess.run([sys.executable, str(script), str(root)], capture_output=True)
    assert done.returncode == -9
    workload_file = root / "workloads/gemm" / f"{GEMM}.jsonl"
    assert len(workload_file.read_text().splitlines()) == 3  # the orphan line is on disk
    with (root / "captures.jsonl").open("a") as stream:
        stream.write('{"uuid": "torn')  # and a torn receipt, as a crash mid-write leaves
    cut = root / f"blob/workloads/{GEMM}/tmpcut.partial"  # and a file killed mid-write
    cut.write_bytes(b"half a blob")
    CaptureWriter(root, {"model": "test/tiny"})  # opening the directory recovers it
    assert not cut.exists()
    assert len(workload_file.read_text().splitlines()) == 2
    assert len((root / "captures.jsonl").read_text().splitlines()) == 2
    report = check_dataset(load_dataset(root))
    assert report.ok, report.problems
    assert report.counts["workloads"] == report.counts["captures"] == 2


def test_hooks_leave_results_unchanged_and_record_linear_mm_and_attention(tmp_path):
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 8).bfloat16()
    x = torch.randn(2, 3, 16).bfloat16()
    q, k, v = (torch.randn(1, 2, 5, 4).bfloat16() for _ in range(3))
    right = torch.randn(16, 8).bfloat16()

    def model():
        return layer(x), torch.mm(x[0], right), F.scaled_dot_product_attention(q, k, v)

    plain = model()
    originals = (F.linear, torch.mm, F.scaled_dot_product_attention)
    writer = CaptureWriter(tmp_path, CONTEXT)
    with TorchHooks(writer, model=layer) as hooks:
        assert F.linear is not originals[0] and torch.mm is not originals[1]
        hooked = model()
        masked = torch.zeros(5, 5, dtype=torch.bool)
        F.scaled_dot_product_attention(q, k, v, attn_mask=masked)
    assert all(torch.equal(a, b) for a, b in zip(plain, hooked, strict=True))
    assert (F.linear, torch.mm, F.scaled_dot_product_attention) == originals  # uninstalled
    assert sorted(writer.definitions) == [
        "dense_gemm_bf16_nt_bias_n8_k16",
        "dense_gemm_bf16_nt_n8_k16",
        "noncausal_dense_attention_h2_d4",
    ]
    assert hooks.skipped == {"torch.nn.functional.scaled_dot_product_attention: masked": 1}
    receipts = [json.loads(line) for line in (tmp_path / "captures.jsonl").read_text().splitlines()]
    linear = next(r for r in receipts if r["definition"].startswith("dense_gemm_bf16_nt_bias"))
    assert linear["axes"] == {"M": 6} and linear["module_path"] == ""
    assert linear["adapters"] == ["flatten leading dimensions [2, 3] into M"]
    dataset = load_dataset(tmp_path)
    mm = dataset.workloads["dense_gemm_bf16_nt_n8_k16"][0]
    stored_w = load_dataset(tmp_path).root / mm.inputs["W"].path
    from safetensors.torch import load_file

    assert torch.equal(load_file(stored_w)["tensor"], right.t())  # [K, N] stored as [N, K]
    for name, workloads in dataset.workloads.items():
        definition = dataset.definitions[name]
        task = generic.task(definition, "", [])
        run = run_case(
            definition,
            workloads[0],
            data_root=tmp_path,
            device="cpu",
            capture=dataset.captures[workloads[0].uuid],
            tolerance=task.tolerance,
        )
        assert (run.status, run.engine_output, run.inputs) == ("passed", "compared", "captured")


def test_replay_fails_when_the_engine_output_disagrees(tmp_path):
    writer = _writer(tmp_path)
    inputs, outputs = _gemm_call(4)
    uuid = writer.write(GEMM, inputs, {"C": outputs["C"] * 2}, {"variant": "doubled"})
    dataset = load_dataset(tmp_path)
    definition = dataset.definitions[GEMM]
    run = run_case(
        definition,
        dataset.workload(GEMM, uuid),
        data_root=tmp_path,
        device="cpu",
        capture=dataset.captures[uuid],
        tolerance=generic.task(definition, "", []).tolerance,
    )
    assert run.status == "mismatch" and run.engine_output == "compared"
    assert run.outputs[0]["mismatched_elements"] > 0


def _capture_of_two_gemms(tmp_path):
    """A complete capture directory: two GEMM workloads, their task and baseline."""
    capture = tmp_path / "capture"
    writer = _writer(capture)
    for rows in (2, 3):
        writer.write(GEMM, *_gemm_call(rows), {"variant": f"rows_{rows}"})
    generic.write_tasks_and_baselines(capture, writer.definitions.values())
    return capture


def test_import_deduplicates_blobs_and_refuses_conflicting_uuids(tmp_path):
    capture, target = _capture_of_two_gemms(tmp_path), tmp_path / "target"
    first = merge(capture, target)
    assert first["workloads_added"] == 2 and first["blobs_added"] == 6
    assert first["definitions_added"] == first["tasks_added"] == first["solutions_added"] == 1
    second = merge(capture, target)
    assert second["workloads_added"] == 0 and second["workloads_present"] == 2
    assert second["blobs_added"] == 0 and second["blobs_shared"] == 6
    assert check_dataset(load_dataset(target)).ok
    receipts = capture / "captures.jsonl"
    records = [json.loads(line) for line in receipts.read_text().splitlines()]
    records[0]["step"] = 99  # the same uuid, another receipt
    receipts.write_text("".join(json.dumps(r) + "\n" for r in records))
    before = sorted(os.listdir(target)), (target / "captures.jsonl").read_text()
    with pytest.raises(DatasetError, match="uuid conflicts"):
        merge(capture, target)
    assert (sorted(os.listdir(target)), (target / "captures.jsonl").read_text()) == before


def test_auxiliary_tensors_get_a_descriptor_and_share_storage(tmp_path):
    writer = _writer(tmp_path)
    table = torch.tensor([[3, 1, -1]], dtype=torch.int32)
    first = writer.tensor(table, "original_page_ids")
    second = writer.tensor(table.clone(), "same_ids_again")
    assert first["path"] == second["path"]
    assert first["path"].startswith("blob/workloads/auxiliary/")
    assert (first["shape"], first["dtype"], first["tensor_key"]) == ([1, 3], "int32", "tensor")
    assert len(_blobs(tmp_path)) == 1


def test_hooks_without_definition_creation_record_only_known_definitions(tmp_path):
    writer = _writer(tmp_path)  # knows dense_gemm_bf16_nt_n8_k16 only
    a, w = torch.ones(2, 16, dtype=torch.bfloat16), torch.ones(8, 16, dtype=torch.bfloat16)
    with TorchHooks(writer, create_definitions=False) as hooks:
        F.linear(a, w)
        F.linear(a, w, torch.ones(8, dtype=torch.bfloat16))
        F.linear(a.float(), w.float())
    assert sorted(writer.definitions) == [GEMM]
    assert writer.counts["written"] == 1
    assert hooks.skipped == {
        "dense_gemm_bf16_nt_bias_n8_k16: no such definition": 1,
        "torch.nn.functional.linear: not BF16": 1,
    }


def test_check_verifies_the_engine_outputs_of_shipped_captures(tmp_path):
    from safetensors.torch import save_file

    writer = _writer(tmp_path)
    uuid = writer.write(GEMM, *_gemm_call(2), {"variant": "rows_2"})
    record = json.loads((tmp_path / "captures.jsonl").read_text())
    output = tmp_path / record["expected_output"]["path"]
    assert check_dataset(load_dataset(tmp_path)).ok
    save_file({"tensor": torch.zeros(2, 8, dtype=torch.bfloat16)}, str(output))
    (problem,) = check_dataset(load_dataset(tmp_path)).problems
    assert (problem.file, problem.field) == ("captures.jsonl", f"uuid {uuid}.expected_output")
    assert "content hash" in problem.message
    output.unlink()
    (problem,) = check_dataset(load_dataset(tmp_path)).problems
    assert "missing" in problem.message


def test_calls_a_definition_cannot_hold_are_skipped_not_raised(tmp_path):
    writer = CaptureWriter(tmp_path, CONTEXT)
    q = torch.randn(2, 2, 5, 4).bfloat16()
    kv = torch.randn(1, 2, 5, 4).bfloat16()  # batch 1 broadcast over the query's batch 2
    with TorchHooks(writer) as hooks:
        broadcast = F.scaled_dot_product_attention(q, kv, kv)
        empty = F.linear(torch.ones(0, 16, dtype=torch.bfloat16), torch.ones(8, 16).bfloat16())
        no_k = F.linear(torch.ones(3, 0, dtype=torch.bfloat16), torch.ones(8, 0).bfloat16())
        weird = F.linear(torch.ones(2, 16).bfloat16(), torch.ones(8, 16).bfloat16())
        hooks.provenance = {"request": {"ids"}}  # a set: not JSON, so no stable uuid
        F.linear(torch.ones(3, 16).bfloat16(), torch.ones(8, 16).bfloat16())
    assert broadcast.shape == (2, 2, 5, 4) and empty.shape == (0, 8) and weird.shape == (2, 8)
    assert no_k.shape == (3, 8) and not no_k.any()  # K = 0: the engine's zeros, untouched
    assert writer.counts["written"] == 1  # only the plain [2, 16] call
    sdpa = "torch.nn.functional.scaled_dot_product_attention"
    assert hooks.skipped[f"{sdpa}: query and key/value batch or head size differ (broadcast)"] == 1
    assert hooks.skipped["torch.nn.functional.linear: empty"] == 2
    (refused,) = [reason for reason in hooks.skipped if "not JSON" in reason]
    assert refused.startswith("torch.nn.functional.linear: provenance value {'ids'}")
    assert check_dataset(load_dataset(tmp_path)).ok


def test_auxiliary_tensors_count_against_the_budget_once(tmp_path):
    writer = _writer(tmp_path, budget_bytes=5000)
    table = torch.arange(1000, dtype=torch.int32)  # 4000 bytes
    assert writer.tensor(table, "a") is not None and writer.written_bytes == 4000
    assert writer.tensor(table.clone(), "same") is not None and writer.written_bytes == 4000
    assert writer.tensor(table + 1, "other") is None  # 4000 more would pass 5000
    assert writer.counts["over_budget"] == 1 and len(_blobs(tmp_path)) == 1


def test_recovery_forgives_only_a_torn_last_line(tmp_path):
    writer = _writer(tmp_path)
    for rows in (1, 2):
        writer.write(GEMM, *_gemm_call(rows), {"variant": f"rows_{rows}"})
    receipts = tmp_path / "captures.jsonl"
    lines = receipts.read_text().splitlines()
    receipts.write_text(lines[0][:-5] + "\n" + lines[1] + "\n")  # damage in the middle
    with pytest.raises(CaptureError, match=r"captures.jsonl: line 1: not JSON"):
        _writer(tmp_path)


def test_import_completes_an_interrupted_import_and_replaces_a_cut_blob(tmp_path):
    capture, target = _capture_of_two_gemms(tmp_path), tmp_path / "target"
    merge(capture, target)
    # As if the import had died after the workload lines: drop the receipts, cut a blob.
    (target / "captures.jsonl").unlink()
    blob = sorted((target / "blob").rglob("*.safetensors"))[0]
    blob.write_bytes(blob.read_bytes()[:10])
    again = merge(capture, target)
    assert again["workloads_added"] == 2 and again["blobs_added"] == 1
    assert check_dataset(load_dataset(target)).ok


def test_import_refuses_a_capture_whose_workloads_lack_receipts(tmp_path):
    capture, target = tmp_path / "capture", tmp_path / "target"
    writer = _writer(capture)
    writer.write(GEMM, *_gemm_call(2), {"variant": "rows_2"})
    (capture / "captures.jsonl").unlink()  # killed before its first receipt
    with pytest.raises(DatasetError, match="has no receipt: an interrupted capture"):
        merge(capture, target)
    assert not (target / "workloads").exists()


def test_check_reports_a_malformed_engine_output_in_one_line(tmp_path):
    writer = _writer(tmp_path)
    uuid = writer.write(GEMM, *_gemm_call(2), {"variant": "rows_2"})
    receipts = tmp_path / "captures.jsonl"
    for value, message in (
        ("oops", "neither a descriptor nor a mapping of them"),
        ({"type": "safetensors"}, "Field required"),
    ):
        record = json.loads(receipts.read_text())
        record["expected_output"] = value
        receipts.write_text(json.dumps(record) + "\n")
        (problem,) = check_dataset(load_dataset(tmp_path)).problems
        assert problem.field.startswith(f"uuid {uuid}.expected_output")
        assert problem.message == message
