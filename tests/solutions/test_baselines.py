"""The plain-PyTorch baselines in dataset/solutions: one per definition, each accepted on the CPU.

Every baseline runs on its definition's smallest workload and on up to two more dev
workloads whose inputs are under 64 MB (the largest and the median of those), on
stand-in inputs (where even the smallest workload is too slow for the CPU, on one
fabricated from it with smaller var axes: FABRICATED), and each output must pass the
task's acceptance check against the FP32 reference. A baseline must leave its inputs
byte-identical and return fresh tensors, never an input or a view of one. Hand-made edge
cases (missing state, empty sequences, keyless rows, ties, grids near the window size...)
check the contracts the stand-ins rarely reach. The ``gpu`` test runs every dev workload
on CUDA against the CUDA reference (through the device tool).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from inference_kernels.acceptance import compare
from inference_kernels.dataset.layout import load_dataset
from inference_kernels.dataset.selection import input_bytes, select
from inference_kernels.materialize.inputs import materialize
from inference_kernels.materialize.references import as_output_list, run_reference
from inference_kernels.schema import Solution

DATASET = Path(__file__).resolve().parents[2] / "dataset"
DEV_INPUT_LIMIT = 64 << 20  # bytes of inputs for the extra dev workloads
SMALLEST_ONLY = {"grouped_gemm"}  # its smallest workload already materializes 2.4-4.8 GB
# The smallest workload resized, for definitions whose smallest real one took minutes on an
# AVX2-only 2-core CI machine: the 11x11x11 neighborhood attention's FP32 reference on
# B1 T49 Y80 X128 (120 s), the BF16 GEMMs at M=4096 (41-47 s each: CPU BF16 matmul without
# AVX-512). Their real shapes are judged in the README's main job (CPU, the smallest
# workload) and on every dev workload on CUDA (the gpu test below, the H200 dev runs).
FABRICATED = {
    "neighborhood_attention_3d_h4_d64_kt11_ky11_kx11": {"T": 12, "Y": 12, "X": 13},
    "dense_gemm_bf16_nt_n12288_k4096": {"M": 257},
    "dense_gemm_bf16_nt_n4096_k4096": {"M": 257},
    "dense_gemm_bf16_nt_n4096_k12288": {"M": 257},
}

DATASET_INDEX = load_dataset(DATASET)
DEFINITIONS = sorted(DATASET_INDEX.definitions)


def load_entry_point(solution: Solution, directory: Path):
    """Write the solution's sources into ``directory`` and import its entry point."""
    for source in solution.sources:
        path = directory / source.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source.content)
    file, _, symbol = solution.spec.entry_point.partition("::")
    module_name = f"baseline_{solution.name}"
    spec = importlib.util.spec_from_file_location(module_name, directory / file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[module_name]
    return module, getattr(module, symbol)


BASELINES = {task.baseline for task in DATASET_INDEX.tasks.values()}


def baseline_of(definition: str):
    return DATASET_INDEX.solutions[DATASET_INDEX.tasks[definition].baseline]


def cases(name: str):
    """The smallest workload, then the largest and the median dev workload under the limit
    (or the smallest resized, for a definition in FABRICATED)."""
    definition = DATASET_INDEX.definitions[name]
    (_, smallest), *_ = select(DATASET_INDEX, [name], "first")
    if name in FABRICATED:
        return definition, [smallest.model_copy(update={"axes": smallest.axes | FABRICATED[name]})]
    chosen = [smallest]
    if definition.op_type not in SMALLEST_ONLY:
        dev = [w for _, w in select(DATASET_INDEX, [name], "dev") if w.uuid != smallest.uuid]
        dev = sorted(
            (w for w in dev if input_bytes(definition, w) <= DEV_INPUT_LIMIT),
            key=lambda w: (input_bytes(definition, w), w.uuid),
        )
        if dev:
            chosen.append(dev[-1])
        if len(dev) > 1:
            chosen.append(dev[(len(dev) - 1) // 2])
    return definition, chosen


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def shares_storage(output: torch.Tensor, inputs: list) -> bool:
    pointer = output.untyped_storage().data_ptr()
    return any(
        isinstance(x, torch.Tensor) and x.untyped_storage().data_ptr() == pointer for x in inputs
    )


# ----------------------------------------------------------------------------- the files


# Library paths a user would pick (issue 14): a solution's name prefix, the package it needs
# (carried to the GPU machine by scripts/gpu_wheels.sh; none of them runs on the CPU).
LIBRARIES = {
    "fla": "fla-core",
    "compile": "torch",
    "natten": "natten",
    "flashinfer": "flashinfer-python",
}


def test_every_definition_has_exactly_one_baseline_file_that_validates():
    files = sorted((DATASET / "solutions").rglob("*.json"))
    seen = {}
    for path in files:
        solution = Solution.model_validate(json.loads(path.read_text()))
        definition = DATASET_INDEX.definitions[solution.definition]
        assert path.relative_to(DATASET) == (
            Path("solutions") / definition.op_type / f"{solution.name}.json"
        )
        if solution.name not in BASELINES and solution.spec.language == "python":
            # a library path (issue 14): named for its library, which it declares, on a GPU
            library = solution.name.split("_")[0]
            assert library in LIBRARIES, solution.name
            assert any(d.startswith(LIBRARIES[library]) for d in solution.spec.dependencies)
            assert solution.spec.target_hardware == ["cuda"], solution.name
            continue
        if solution.name not in BASELINES:  # a kernel of ours (tests/solutions/test_kernels.py)
            assert solution.spec.language in ("triton", "cuda", "cpp"), solution.name
            assert solution.name.startswith(f"{solution.spec.language}_"), solution.name
            continue
        assert solution.name == f"torch_{definition.name}"
        assert solution.spec.entry_point == "main.py::run"
        assert solution.spec.destination_passing_style is False
        assert [s.path for s in solution.sources] == ["main.py"]
        assert solution.definition not in seen, f"two baselines for {solution.definition}"
        seen[solution.definition] = path
    assert sorted(seen) == DEFINITIONS
    assert not [p for p in DATASET_INDEX.problems if p.file.startswith("solutions")]


def test_baseline_sources_use_plain_torch_only():
    for solution in map(baseline_of, DEFINITIONS):
        source = solution.sources[0].content
        imports = {
            line.split()[1].split(".")[0]
            for line in source.splitlines()
            if line.startswith(("import ", "from "))
        }
        assert imports <= {"math", "torch"}, (solution.name, imports)
        assert ".cuda(" not in source, solution.name


# ----------------------------------------------------------------------------- the runs


@pytest.mark.parametrize("name", DEFINITIONS)
def test_baseline_matches_the_reference_on_stand_ins(name, tmp_path):
    solution = baseline_of(name)
    module, entry = load_entry_point(solution, tmp_path)
    definition, workloads = cases(name)
    tolerance = DATASET_INDEX.tasks[name].tolerance
    for index, workload in enumerate(workloads):
        inputs = materialize(
            definition,
            workload,
            data_root=DATASET_INDEX.root,
            capture=DATASET_INDEX.captures.get(workload.uuid),
        ).values
        before = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        outputs = as_output_list(entry(*inputs), definition)
        for spec_name, x, kept in zip(definition.inputs, inputs, before, strict=True):
            if isinstance(x, torch.Tensor):
                assert same_bytes(x, kept), f"{name}: input {spec_name} was modified"
            else:
                assert x == kept
        del before
        if (
            index == 0
            and hasattr(module, "prepare")
            and input_bytes(definition, workload) < (DEV_INPUT_LIMIT)
        ):
            launch = module.prepare(*inputs)
            again = as_output_list(launch(), definition) + as_output_list(launch(), definition)
            for output, repeat in zip(outputs * 2, again, strict=True):
                assert same_bytes(output, repeat), f"{name}: prepare()() differs from run()"
        expected = run_reference(definition, inputs)
        assert len(outputs) == len(definition.outputs)
        for output_name, output, reference in zip(
            definition.outputs, outputs, expected, strict=True
        ):
            assert isinstance(output, torch.Tensor), f"{name}.{output_name}: not a tensor"
            assert not shares_storage(output, inputs), f"{name}.{output_name} aliases an input"
            verdict = compare(output, reference, tolerance)
            print(
                f"{name} {workload.uuid[:8]} {output_name}: {verdict.status} "
                f"matched {verdict.matched_ratio:.6f} max_abs {verdict.max_absolute_error}"
            )
            assert verdict.passed, f"{name} {workload.uuid} {output_name}: {verdict.message}"


# ----------------------------------------------------------------------------- edge cases


@pytest.fixture(autouse=True)
def seeded():
    """The edge cases draw from torch's global generator: the same draws in every run."""
    torch.manual_seed(0)


def check_edge_case(name: str, inputs: list, tmp_path: Path) -> None:
    """The baseline on hand-made inputs against the reference, under the task's tolerance."""
    definition = DATASET_INDEX.definitions[name]
    _, entry = load_entry_point(baseline_of(name), tmp_path)
    before = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    outputs = as_output_list(entry(*inputs), definition)
    for x, kept in zip(inputs, before, strict=True):
        assert not isinstance(x, torch.Tensor) or same_bytes(x, kept)
    expected = run_reference(definition, inputs)
    for output, reference in zip(outputs, expected, strict=True):
        assert not shares_storage(output, inputs)
        verdict = compare(output, reference, DATASET_INDEX.tasks[name].tolerance)
        assert verdict.passed, f"{name}: {verdict.message}"


def bf16(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def test_gdn_decode_without_state_and_with_the_default_scale(tmp_path):
    heads = torch.arange(8, dtype=torch.float32)
    inputs = [bf16(3, 1, 4, 128, seed=1) * 0.1, bf16(3, 1, 4, 128, seed=2) * 0.1]
    inputs += [bf16(3, 1, 8, 128, seed=3), None, heads / 4, bf16(3, 1, 8, seed=4)]
    inputs += [-heads / 8, bf16(3, 1, 8, seed=5), 0.0]
    check_edge_case("gdn_decode_qk4_v8_d128_k_last", inputs, tmp_path)


def gdn_prefill_uneven(with_state: bool) -> list:
    """Six sequences of 0, 5, 0, 1, 11 and 0 tokens (empty ones first and last), with an
    input state or none (also tests/solutions/kernel_check.py's --edges)."""
    cu_seqlens = torch.tensor([0, 0, 5, 5, 6, 17, 17], dtype=torch.int64)
    tokens, sequences = 17, 6
    heads = torch.arange(8, dtype=torch.float32)
    g = torch.Generator().manual_seed(10)
    state = torch.randn(sequences, 8, 128, 128, generator=g) * 0.1 if with_state else None
    inputs = [bf16(tokens, 4, 128, seed=1) * 0.1, bf16(tokens, 4, 128, seed=2) * 0.1]
    inputs += [bf16(tokens, 8, 128, seed=3), state, heads / 4, bf16(tokens, 8, seed=4)]
    return [*inputs, -heads / 8, bf16(tokens, 8, seed=5), cu_seqlens, None]


@pytest.mark.parametrize("with_state", [True, False])
def test_gdn_prefill_with_empty_and_uneven_sequences(with_state, tmp_path):
    check_edge_case("gdn_prefill_qk4_v8_d128_k_last", gdn_prefill_uneven(with_state), tmp_path)


def test_grouped_gemm_with_few_experts_many_rows_and_unused_experts(tmp_path):
    from inference_kernels.materialize.standins.streams import quantize_e4m3_ue8m0

    experts, rows, n, k = 6, 300, 64, 256
    generator = torch.Generator().manual_seed(0)
    activations, scale_a = quantize_e4m3_ue8m0(torch.randn(rows, k, generator=generator), 32)
    packed = torch.randint(-128, 128, (experts, n, k // 2), generator=generator, dtype=torch.int8)
    scale_w = torch.randint(119, 123, (experts, n, k // 32), generator=generator, dtype=torch.uint8)
    expert_id = torch.tensor([0] * 7 + [2] * 200 + [3] + [5] * 92, dtype=torch.int32)
    inputs = [activations, packed, scale_a.view(torch.int8), scale_w.view(torch.int8), expert_id]
    name = "grouped_gemm_fp8_fp4_e384_n5120_k2304_g32"
    check_edge_case(name, inputs, tmp_path)


def test_router_with_image_tokens_and_a_large_scale(tmp_path):
    image = torch.tensor([False, True, True, False, True])
    inputs = [bf16(5, 5120, seed=1), bf16(384, 5120, seed=2) * 0.02]
    inputs += [torch.randn(384) * 0.1, torch.randn(384) * 0.1, image, 2.5]
    check_edge_case("moe_router_gemm_topk_deepseek41_d5120_e384_topk6", inputs, tmp_path)


@pytest.mark.parametrize("sink", [0.5, float("-inf"), 12.0])
def test_sparse_mla_with_keyless_rows_out_of_range_indices_and_extreme_sinks(sink, tmp_path):
    rows, kv_rows, top_k = 5, 40, 128
    indices = torch.full((rows, 1, top_k), -1, dtype=torch.int32)
    indices[1, 0, :3] = torch.tensor([0, 39, 40])  # 40 is out of range: skipped
    indices[2, 0, :10] = torch.arange(10)
    indices[3, 0, :50] = torch.randperm(40).repeat(2)[:50].int()  # repeated rows count twice
    indices[4, 0, :] = torch.randint(0, kv_rows, (top_k,)).int()
    topk_length = torch.tensor([0, 3, 4, 50, 0], dtype=torch.int32)  # row 2: only 4 of 10 count
    attn_sink = torch.full((64,), sink)
    inputs = [bf16(rows, 64, 512, seed=1), bf16(kv_rows, 1, 512, seed=2), indices, topk_length]
    inputs += [attn_sink, 512**-0.5]
    check_edge_case("sparse_mla_prefill_h64_d512_k128", inputs, tmp_path)


def test_mixed_mla_with_a_query_without_tokens(tmp_path):
    from inference_kernels.materialize.standins.mla import fp4_pages, fp8_pages

    kv8 = fp8_pages(torch.randn(2, 256, 512))
    kv4 = fp4_pages(torch.randn(3, 128, 512))
    indices8 = torch.full((3, 1, 128), -1, dtype=torch.int32)
    indices4 = torch.full((3, 1, 512), -1, dtype=torch.int32)
    indices8[0, 0, :100] = torch.randperm(512)[:100].int()
    indices4[0, 0, :300] = torch.randperm(384)[:300].int()
    indices4[2, 0, :7] = torch.arange(7, dtype=torch.int32) * 50
    inputs = [bf16(3, 1, 64, 512, seed=1), kv8, kv4, indices8, indices4, torch.randn(64), 0.05]
    check_edge_case("mixed_mla_decode_deepseek41_h64_d512_k8128_k4512", inputs, tmp_path)


def test_qsa_index_breaks_massive_ties_towards_lower_ids(tmp_path):
    # Three distinct key vectors: every score is one of three values, so the cut is a tie.
    pages, page = 80, 16
    choice = torch.randint(0, 3, (pages, page), generator=torch.Generator().manual_seed(3))
    keys = bf16(3, 128, seed=7)[choice][:, :, None]
    page_table = torch.stack((torch.randperm(pages)[:64], torch.randperm(pages)[:64])).int()
    page_table[1, 40:] = -1
    counts = torch.tensor([1023, 513], dtype=torch.int32)
    inputs = [bf16(2, 4, 128, seed=8), keys, page_table, counts]
    check_edge_case("qsa_index_topk_decode_qwen38_h4_d128_topk512_c4", inputs, tmp_path)


def test_qsa_sparse_gqa_with_short_rows_and_complete_tails(tmp_path):
    lengths = torch.tensor([1, 3, 4, 130, 2100], dtype=torch.int32)
    block_ids = torch.full((5, 512), -1, dtype=torch.int32)
    block_ids[2, :1] = 0
    block_ids[3, :32] = torch.arange(32)
    block_ids[4] = torch.randperm(525)[:512].sort().values.int()
    page_table = torch.full((5, 33), -1, dtype=torch.int32)
    for row, length in enumerate(lengths.tolist()):
        used = -(-length // 64)
        page_table[row, :used] = torch.randperm(40)[:used].int()
    inputs = [bf16(5, 24, 256, seed=1), bf16(40, 64, 2, 256, seed=2), bf16(40, 64, 2, 256, seed=3)]
    inputs += [page_table, block_ids, lengths]
    check_edge_case("qsa_sparse_gqa_decode_qwen38_h24_kv2_d256_topk512_c4", inputs, tmp_path)


@pytest.mark.parametrize("sizes", [(3, 7, 7), (5, 9, 12), (4, 13, 17)])
def test_neighborhood_attention_on_grids_near_the_window_size(sizes, tmp_path):
    shape = (2, *sizes, 32, 64)
    inputs = [bf16(*shape, seed=1) * 0.125, bf16(*shape, seed=2), bf16(*shape, seed=3)]
    check_edge_case("neighborhood_attention_3d_h32_d64_kt3_ky7_kx7", inputs, tmp_path)


def test_prefix0_with_several_image_blocks(tmp_path):
    image_ids = torch.tensor([-1] * 5 + [0] * 9 + [-1] * 3 + [1] * 11 + [2] * 4, dtype=torch.int32)
    inputs = [bf16(2, 32, 32, 128, seed=s) for s in (1, 2, 3)] + [image_ids]
    check_edge_case("prefix_cached_block_causal_h32_d128_prefix0", inputs, tmp_path)


# ----------------------------------------------------------------------------- CUDA


@pytest.mark.gpu
@pytest.mark.parametrize("name", DEFINITIONS)
def test_baseline_matches_the_cuda_reference_on_every_dev_workload(name, tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    solution = baseline_of(name)
    _, entry = load_entry_point(solution, tmp_path)
    definition = DATASET_INDEX.definitions[name]
    tolerance = DATASET_INDEX.tasks[name].tolerance
    pairs = select(DATASET_INDEX, [name], "first") + select(DATASET_INDEX, [name], "dev")
    for workload in {w.uuid: w for _, w in pairs}.values():
        inputs = materialize(
            definition,
            workload,
            data_root=DATASET_INDEX.root,
            device="cuda",
            capture=DATASET_INDEX.captures.get(workload.uuid),
        ).values
        before = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        outputs = as_output_list(entry(*inputs), definition)
        for x, kept in zip(inputs, before, strict=True):
            assert not isinstance(x, torch.Tensor) or same_bytes(x, kept)
        del before
        expected = run_reference(definition, inputs)
        for output_name, output, reference in zip(
            definition.outputs, outputs, expected, strict=True
        ):
            assert output.device.type == "cuda"
            assert not shares_storage(output, inputs)
            verdict = compare(output, reference, tolerance)
            print(
                f"{name} {workload.uuid[:8]} {output_name}: {verdict.status} "
                f"matched {verdict.matched_ratio:.6f} max_abs {verdict.max_absolute_error}"
            )
            assert verdict.passed, f"{name} {workload.uuid} {output_name}: {verdict.message}"
        del inputs, outputs, expected
        torch.cuda.empty_cache()
