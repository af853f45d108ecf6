import numpy as np
import pytest
import torch
from materialized_inputs import made

from inference_kernels.dataset import constraints
from inference_kernels.dataset.selection import input_bytes, select
from inference_kernels.materialize.inputs import materialize

CHEAP = 64 * 2**20  # dev workloads under this many input bytes are all checked


def _stands_in(workload) -> bool:
    """Whether the workload's tensors are generated (the MiniLM corner ships captured
    tensors)."""
    return all(descriptor.type != "safetensors" for descriptor in workload.inputs.values())


def test_materializing_twice_gives_byte_identical_tensors(first_suite):
    # the first suite's stand-ins, materialized twice in a row in its pass (conftest.py)
    cases = [c for c in first_suite if _stands_in(c.workload)]
    assert len(cases) == 21
    for case in cases:
        assert case.hashes == case.again, case.definition.name
        assert case.origin == "stand-in" and case.generator != "generic.generic"


def test_streams_depend_on_workload_and_input_name(bundled):
    (definition, first), (_, second) = select(bundled, ["dense_gemm_bf16_nt_n4096_k4096"], "dev")[
        :2
    ]
    a = made(bundled, definition, first).values
    b = made(bundled, definition, second).values
    assert not torch.equal(a[0][:8, :8], b[0][:8, :8])
    assert not torch.equal(a[0][:8, :8], a[1][:8, :8])


def test_every_constraint_holds_on_stand_ins(bundled, first_suite):
    checked = 0
    for case in first_suite:  # evaluated on the first suite's inputs in its pass
        for expression, holds in case.constraints:
            assert holds is True, (case.definition.name, expression, holds)
            checked += 1
    for definition, workload in select(bundled, suite="dev"):
        if input_bytes(definition, workload) >= CHEAP:
            continue
        inputs = made(bundled, definition, workload)
        values = {**definition.const_axes(), **workload.axes}
        values.update(zip(inputs.names, inputs.values, strict=True))
        for expression in definition.constraints:
            assert constraints.evaluate(expression, values) is True, (definition.name, expression)
            checked += 1
    assert checked > 300


def inputs_of(bundled, name, suite="dev"):
    for definition, workload in select(bundled, [name], suite):
        if input_bytes(definition, workload) < CHEAP:
            inputs = made(bundled, definition, workload)
            yield workload, dict(zip(inputs.names, inputs.values, strict=True))


def test_qsa_page_tables_are_compact_and_lengths_fill_their_pages(bundled):
    for workload, x in inputs_of(bundled, "qsa_index_topk_decode_qwen38_h4_d128_topk512_c4"):
        axes, table = workload.axes, x["page_table"]
        used = table[table >= 0]
        assert sorted(set(used.tolist())) == list(range(axes["NP"]))  # every live page is used
        for row in range(axes["B"]):
            valid = int((table[row] >= 0).sum())
            assert torch.all(table[row, :valid] >= 0) and torch.all(table[row, valid:] == -1)
            assert len(set(table[row, :valid].tolist())) == valid
            pages_needed = -(-int(x["num_complete_blocks"][row]) // axes["P"])
            assert pages_needed == valid
        assert int((table >= 0).sum(1).max()) == axes["MP"]


def test_sparse_gqa_block_ids_follow_the_indexer_contract(bundled):
    for _, x in inputs_of(bundled, "qsa_sparse_gqa_decode_qwen38_h24_kv2_d256_topk512_c4"):
        for row, length in enumerate(x["context_lens"].tolist()):
            ids = x["block_ids"][row]
            valid = ids[ids >= 0]
            complete = length // 4
            assert torch.all(ids[len(valid) :] == -1)
            if complete <= 512:
                assert valid.tolist() == list(range(complete))
            else:
                assert len(valid) == 512 and torch.all(valid.diff() > 0)
                assert int(valid.max()) < complete


def test_grouped_gemm_bytes_are_well_formed(bundled):
    name = "grouped_gemm_fp8_fp4_e384_n5120_k2304_g32"
    for _, x in inputs_of(bundled, name, "first"):
        assert torch.isfinite(x["Aq"].float()).all()
        for scales in (x["scale_A"], x["scale_W"]):
            as_bytes = scales.view(torch.uint8)
            assert int(as_bytes.min()) >= 1 and int(as_bytes.max()) <= 254
        # activations use their range: the largest |value| of a group is near 448 / 2^k
        dequant = x["Aq"].float() * torch.exp2(
            x["scale_A"].view(torch.uint8).float() - 127
        ).repeat_interleave(32, -1)
        assert 0.5 < float(dequant.abs().max()) < 8
        assert torch.all(x["expert_id"].diff() >= 0)


def test_mixed_mla_caches_and_indices(bundled):
    name = "mixed_mla_decode_deepseek41_h64_d512_k8128_k4512"
    for workload, x in inputs_of(bundled, name):
        axes = workload.axes
        pages8 = x["KV8"].reshape(axes["N8"], -1).view(torch.uint8)
        data8 = pages8[:, : axes["P8"] * 512]
        scales8 = pages8[:, axes["P8"] * 512 :]
        assert not torch.any((data8 & 0x7F) == 0x7F)  # no e4m3 NaN bytes
        assert int(scales8.min()) >= 1 and int(scales8.max()) <= 254
        pages4 = x["KV4"].reshape(axes["N4"], -1)
        scales4 = pages4[:, axes["P4"] * 256 :].view(torch.float8_e4m3fn).float()
        assert torch.all(scales4 > 0) and torch.all(torch.isfinite(scales4))
        for key, slots in (
            ("indices8", axes["N8"] * axes["P8"]),
            ("indices4", axes["N4"] * axes["P4"]),
        ):
            for row in x[key].reshape(-1, x[key].shape[-1]):
                valid = row[row >= 0]
                assert torch.all(row[len(valid) :] == -1)  # padding only at the end
                assert len(set(valid.tolist())) == len(valid) and int(valid.max()) < slots


def test_sparse_prefill_rows_are_causal_and_distinct(bundled):
    for workload, x in inputs_of(bundled, "sparse_mla_prefill_h64_d512_k128", "first"):
        rows, kv = workload.axes["M"], workload.axes["Nkv"]
        for row in range(rows):
            count = int(x["topk_length"][row])
            picked = x["indices"][row, 0, :count]
            visible = -(-(row + 1) * kv // rows)
            assert count == min(128, visible)
            assert len(set(picked.tolist())) == count and int(picked.max()) < visible
            assert torch.all(x["indices"][row, 0, count:] == -1)


def test_gdn_inputs_are_in_the_models_range(bundled):
    for workload, x in inputs_of(bundled, "gdn_prefill_qk4_v8_d128_k_last"):
        cu = x["cu_seqlens"]
        assert int(cu[0]) == 0 and int(cu[-1]) == workload.axes["total_seq_len"]
        assert torch.all(cu.diff() >= 1)
        norms = x["q"].float().norm(dim=-1)
        assert torch.allclose(norms, torch.ones_like(norms), atol=1e-2)
        decay = torch.exp(
            -torch.exp(x["A_log"]) * torch.nn.functional.softplus(x["a"].float() + x["dt_bias"])
        )
        assert float(decay.min()) > 0 and float(decay.max()) < 1
        assert (
            1.0 <= float(torch.exp(x["A_log"]).min()) and float(torch.exp(x["A_log"]).max()) <= 16.0
        )


def test_prefix0_image_ids_come_from_the_capture_segments(bundled):
    name = "prefix_cached_block_causal_h32_d128_prefix0"
    for workload, x in inputs_of(bundled, name, "all"):
        segments = bundled.captures[workload.uuid].model_extra["prefix_segments"]
        expected = np.full(workload.axes["Nq"], -1)
        image = 0
        for start, end, is_image in segments:
            if is_image:
                expected[start:end] = image
                image += 1
        assert x["image_ids"].tolist() == expected.tolist()


def test_router_marks_a_contiguous_quarter_as_image_tokens(bundled):
    for workload, x in inputs_of(bundled, "moe_router_gemm_topk_deepseek41_d5120_e384_topk6"):
        rows = workload.axes["M"]
        flags = x["is_image_token"]
        assert int(flags.sum()) == rows // 2 - rows // 4
        assert flags[rows // 4 : rows // 2].all()


@pytest.mark.parametrize("uuid_index", [0, 1])
def test_stand_in_labels_survive_the_blob_store(bundled, tmp_path, uuid_index):
    from inference_kernels.dataset.layout import load_dataset
    from inference_kernels.materialize.export import export_dataset

    name = "qsa_sparse_gqa_decode_qwen38_h24_kv2_d256_topk512_c4"
    definition, workload = select(bundled, [name], "dev")[uuid_index]
    export_dataset(bundled, [(definition, workload)], tmp_path)
    exported = load_dataset(tmp_path)
    assert not exported.problems and exported.rooflines[name] == bundled.rooflines[name]
    again = materialize(definition, exported.workloads[name][0], data_root=tmp_path)
    original = made(bundled, definition, workload)
    assert again.origin == "stand-in" and again.generator == original.generator
    assert all(d.type != "random" for d in exported.workloads[name][0].inputs.values())
    for a, b in zip(again.values, original.values, strict=True):
        assert torch.equal(a, b)


def test_expert_weights_are_the_models_made_once_and_kept_per_definition(bundled):
    # The grouped GEMMs' experts (2.3-4.8 GB) are model parameters: every workload of a
    # definition gets the same ones, generated once per process (the audit regenerated them
    # for each of 104 workloads); activations and expert ids stay the workload's own. A small
    # copy of the definition (E 4, N 64, K 64) keeps the test light.
    from inference_kernels.materialize.standins import context

    real = bundled.definitions["grouped_gemm_fp8_fp4_e384_n4608_k5120_g32"]
    axes = {**real.axes}
    for axis, value in {"E": 4, "N": 64, "K": 64, "K_packed": 32, "K_groups": 2}.items():
        axes[axis] = axes[axis].model_copy(update={"value": value})
    small = real.model_copy(update={"axes": axes})
    ordered = sorted(bundled.workloads[real.name], key=lambda w: w.axes["M"])
    first, second = ordered[0], ordered[-1]
    assert first.axes["M"] < second.axes["M"]
    a, b = (made(bundled, small, w) for w in (first, second))
    weights = {name: a.names.index(name) for name in ("Wq_packed", "scale_W")}
    for name, index in weights.items():
        assert a.values[index].data_ptr() == b.values[index].data_ptr(), name  # kept
        assert a.values[index].shape == (4, 64, 32 if name == "Wq_packed" else 2)
    assert a.values[a.names.index("Aq")].shape[0] != b.values[b.names.index("Aq")].shape[0]
    kept = a.values[weights["Wq_packed"]].clone()
    owner = context._PARAMETERS["definition"]
    # another definition's weights replace them (one definition kept at a time) ...
    other = bundled.definitions["grouped_gemm_fp8_fp4_e384_n5120_k2304_g32"]
    axes = {**other.axes}
    for axis, value in {"E": 4, "N": 32, "K": 64, "K_packed": 32, "K_groups": 2}.items():
        axes[axis] = axes[axis].model_copy(update={"value": value})
    made(bundled, other.model_copy(update={"axes": axes}), bundled.workloads[other.name][0])
    assert context._PARAMETERS["definition"] != owner
    assert not any(key[0] == owner for key in context._PARAMETERS if isinstance(key, tuple))
    # ... and coming back makes the same bytes again: they are the definition's
    again = made(bundled, small, second)
    assert torch.equal(again.values[weights["Wq_packed"]], kept)
    # one device copy per parameter, kept with it (the meta device stands in for CUDA)
    meta = torch.device("meta")
    weight = again.values[weights["Wq_packed"]]
    assert context.parameter_on(weight, meta) is context.parameter_on(weight, meta)
    assert context.parameter_on(weight.clone(), meta) is not context.parameter_on(weight, meta)
