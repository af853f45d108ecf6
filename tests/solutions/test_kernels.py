"""Our own kernels in dataset/solutions (Triton; issue 14), checked on the CPU through
Triton's interpreter (``TRITON_INTERPRET=1``, in a process of its own: kernel_check.py):
on each definition's smallest workload and its next-smallest dev one (stand-in inputs), or
on a fabricated smaller one where even the smallest is too large for it (FABRICATED), each
output passes the task's acceptance check against the FP32 reference, the inputs stay
byte-identical and every load, store and atomic stays inside the kernel's tensor arguments
(kernel_check's bounds check); a kernel that is off (a wrong scale) fails the same check. Their
speed, and every dev workload, are the H200's business (``run --device cuda``): the
interpreter says nothing of either."""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_baselines import DATASET_INDEX

HERE = Path(__file__).resolve().parent
KERNELS = sorted(s.name for s in DATASET_INDEX.solutions.values() if s.spec.language == "triton")
# Checked on the smallest workload only (and on hand-made inputs, below): the interpreter
# took 35 s on k128's next one.
SMALLEST_ONLY = {
    "triton_sparse_mla_prefill_h64_d512_k128",
    "triton_grouped_gemm_fp8_fp4_e384_n5120_k2304_g32",  # 4.5 GB of experts
}
# Module constants set for the real-size check (kernel_check.py --set): the grouped GEMM's
# 64-column tiles made 80 x 6 programs of 72 scale groups on the smallest workload (150 s
# here); 256 columns, a quarter of the programs. Its edges check the tiles it ships with.
# The chunked GDN's default pair (6 and 30 tokens) goes token by token in 256 programs of 4
# state rows (50 s here at 204a386); 32 rows, 32 programs, as its edges check takes them.
WIDER_TILES = {
    "triton_grouped_gemm_fp8_fp4_e384_n5120_k2304_g32": "BLOCK_N=256",
    "triton_chunked_gdn_prefill_qk4_v8_d128_k_last": "SHORT_ROWS=32",
}
# The same source as a kernel checked here, with other constants: not run again (the
# interpreter took 80 s on the smallest n4608 k5120 workload; 34 s on the 32-head 3x7x7
# neighborhood attention, whose windows are the 16-head one's: only the heads differ).
SAME_SOURCE = {
    "triton_grouped_gemm_fp8_fp4_e384_n4608_k5120_g32": (
        "triton_grouped_gemm_fp8_fp4_e384_n5120_k2304_g32"
    ),
    "triton_neighborhood_attention_3d_h32_d64_kt3_ky7_kx7": (
        "triton_neighborhood_attention_3d_h16_d64_kt3_ky7_kx7"
    ),
}
# Checked on one fabricated workload only (the smallest with these axes, stand-in inputs):
# the interpreter took 74 s on the smallest 3x7x7 neighborhood attention (H 32, T 9, Y 10,
# X 16), the 11x11x11 one (T 49, Y 80, X 128) would take hours. Each axis a little past the
# window (windows clamped at both ends), the last box of queries partly outside X (and T,
# Y where that stays under a minute), key boxes longer than T (6 and 14 frames).
FABRICATED = {
    "triton_neighborhood_attention_3d_h16_d64_kt3_ky7_kx7": {"B": 1, "T": 5, "Y": 10, "X": 13},
    "triton_neighborhood_attention_3d_h4_d64_kt11_ky11_kx11": {"B": 1, "T": 12, "Y": 12, "X": 13},
    "triton_neighborhood_attention_3d_h8_d64_kt3_ky5_kx5": {"B": 1, "T": 5, "Y": 9, "X": 11},
    # 24 of the smallest workload's 128 tokens, each with its 640 keys (43 s for all 128)
    "triton_sparse_mla_prefill_h64_d512_k640": {"M": 24},
    # two batches, two prefix and two current key tiles each, the last of each part-filled,
    # one part-filled tile of queries (3 s; the smallest workload's 4,096 queries would take
    # hours); a kernel that leaves out the last prefix tile fails it
    "triton_prefix_cached_block_causal_h32_d128": {"B": 2, "Nq": 70, "Np": 66},
}


# The interpreter is one core's work: the module's checks run two at a time (the CI
# machine's two cores), all started when the module begins (those of the selected tests,
# ``_started_together``), each test waiting for its own. One at a time they took about
# 290 s of the suite's 1,270 (fresh clone at 7266ca0).
POOL = concurrent.futures.ThreadPoolExecutor(max_workers=2)
_STARTED: dict[tuple[str, ...], concurrent.futures.Future] = {}
ROUTER_TILED = (  # the smallest workloads are decode (M=1: the GEMV path); M=128 the tiled one
    "triton_moe_router_gemm_topk_deepseek41_d5120_e384_topk6",
    "--uuid",
    "7414061c-d565-5448-9e7a-78d5b1ebfdb4",
)
# the same with D split over 4 programs a tile (SPLIT_K, a variant), their raw sums added
# into zeroed scores and finished by _select: a part that sums the first quarter of D, a
# _select that leaves the sums raw, or scores not zeroed (poisoned) fails both outputs
ROUTER_SPLIT_K = (*ROUTER_TILED, "--set", "SPLIT_K=4", "--poison")
# the same with its sums made by torch.mm (WIDE "cublas", a variant: cuBLAS on a GPU, FP32
# matmul here) and finished by _select as it reads them
ROUTER_CUBLAS = (*ROUTER_TILED, "--set", "WIDE=cublas", "--poison")
# The smallest workloads fit in one chunk of 64 tokens; these 239 tokens (sequences of 58,
# 91 and 90) carry the state from chunk to chunk and end in partial chunks (a diagonal
# block's substitution step that adds the row it should subtract fails both outputs, as
# does a Delta made without its beta gamma K S term).
GDN_CHUNKS = (
    "triton_chunked_gdn_prefill_qk4_v8_d128_k_last",
    "--uuid",
    "e92dafeb-3d50-4bce-90c3-6d0172e189d3",
)
# Six sequences of 0, 5, 0, 1, 11 and 0 tokens, with a state and without: 17 tokens, taken
# token by token (SHORT_TOKENS; here 32 state rows a program, for fewer programs in the
# interpreter); its loads past a sequence's end are clamped to the sequence's last token
# (kernel_check's bounds check fails a load past the last sequence's end, outside the tensor)
GDN_SHORT = ("triton_chunked_gdn_prefill_qk4_v8_d128_k_last", "--edges", "--set", "SHORT_ROWS=32")
# the same with the key, query and value loaded into the state's layout (SHORT_LOADS "rows",
# swept and not taken: each row's value in its column 0; a load of column 1 fails both)
GDN_SHORT_ROWS = (*GDN_SHORT, "--set", "SHORT_LOADS=rows")
# the same in the chunked kernels (the dev workloads the interpreter can take are short)
GDN_CHUNKED_EDGES = (GDN_SHORT[0], "--edges", "--set", "SHORT_TOKENS=0")
# 2,051 positions at B 1 (512 valid blocks and a tail of 3 tokens): every one of the 33
# splits of 64 holds tokens, the last the tail's three (in the default pair's B 2 workload
# the last split holds one token of 2,049); a merge that drops the last split fails here
QSA_SPARSE_SPLITS = (
    "triton_qsa_sparse_gqa_decode_qwen38_h24_kv2_d256_topk512_c4",
    "--uuid",
    "ddd92acb-4b1d-5b61-9eba-dee6bc202b88",
)
# the splits of 32 that a GPU's decode takes where 64 would not fill its multiprocessors (B 1):
# run() counting an H200's 132, as on the GPU (on the CPU it counts none and keeps SPLIT)
QSA_SPARSE_FEW = (*QSA_SPARSE_SPLITS, "--set", "MULTIPROCESSORS=132")
# the split's block ids loaded masked by the row's count (IDS "masked", as first judged; the
# shipped "clamped" loads them with the row's, the index clamped: an id one place on fails)
QSA_SPARSE_MASKED = (*QSA_SPARSE_SPLITS, "--set", "IDS=masked")
WRONG_SCALE = ("triton_gdn_decode_qk4_v8_d128_k_last", "--wrong-scale")
# GDN decode with the key, query and value loaded into the state's layout (LOADS "rows",
# shipped), B 32: 256 (sequence, head) pairs, 32 state rows a program (the B 1 pair, 16, is
# the default check; a load of each row's value from column 1 fails both outputs)
GDN_DECODE_ROWS = (WRONG_SCALE[0], "--uuid", "d38dde79-79f9-4c2d-8bbe-05ee1be48583")
# the same pair with them loaded as vectors and moved into that layout (as first judged)
GDN_DECODE_VECTORS = (WRONG_SCALE[0], "--set", "LOADS=vectors")
# The selection stops at the first pass that settles T's bucket: the default pair's B 2 rows
# of 2,112 distinct scores settle early (a test for settling that keeps one key too many
# writes past the row's 512 ids and fails); a cut among the edges' ties never settles, their
# wide rows of distinct scores do.
QSA_TIES = ("triton_qsa_index_topk_decode_qwen38_h4_d128_topk512_c4", "--edges")
QSA_TIES_RELOADED = (*QSA_TIES, "--set", "KEYS=reload")  # read for every pass, as first judged
# A second stage of more than 4,096 candidates held in registers (CANDIDATES 8192, shipped):
# segments of 1,024 ids make the 9,000-block row's 4,608 candidates; the same read in chunks
# of 4,096 for every pass (CANDIDATES 4096, as first judged; still the path of rows of more
# than 8,192 candidates)
QSA_CANDIDATES_HELD = (*QSA_TIES, "--set", "SEGMENT=1024")
QSA_CANDIDATES_CHUNKED = (*QSA_CANDIDATES_HELD, "--set", "CANDIDATES=4096")
# each head's query loaded as a vector and moved into the keys' layout (QUERIES "vectors", as
# first judged; the shipped "rows" loads it there): the default pair, whose B 2 rows of 132
# pages are scored (one query for every head fails there)
QSA_QUERY_VECTORS = (QSA_TIES[0], "--set", "QUERIES=vectors")
BLOCK_CAUSAL_IMAGES = ("triton_prefix_cached_block_causal_h32_d128_prefix0", "--edges")
# the 3x5x5 neighborhood attention's fabricated shape in boxes of 32 and of 16 queries
# (QUERIES, the sweep's: more boxes, each partly outside Y and X, smaller key boxes)
NA_BOXES = ("triton_neighborhood_attention_3d_h8_d64_kt3_ky5_kx5", "--axes", "B=1,T=5,Y=9,X=11")
NA_BOXES_32, NA_BOXES_16 = ((*NA_BOXES, "--set", f"QUERIES={n}") for n in (32, 16))
MIXED_MLA_PAGES = ("triton_mixed_mla_decode_deepseek41_h64_d512_k8128_k4512", "--edges")
GROUPED_GEMM_EDGES = ("triton_grouped_gemm_fp8_fp4_e384_n5120_k2304_g32", "--edges")
# the tiles found by seven torch kernels (PLAN "torch", as first judged) rather than one
# Triton program
GROUPED_GEMM_PLAN = (*GROUPED_GEMM_EDGES, "--set", "PLAN=torch")
# the step's scale table loaded once, each group's column taken out of it (SCALES "table", as
# first judged; the shipped "group" loads each group's scales where its product is scaled: a
# row or column scale read at the step's first group fails), and "group" with the product
# not swapped
GROUPED_GEMM_TABLE = (*GROUPED_GEMM_EDGES, "--set", "SCALES=table")
GROUPED_GEMM_ROWS = (*GROUPED_GEMM_EDGES, "--set", "SMALL_PRODUCT=rows")
# the decode by compares and selects, the small tiles' product as A W^T
GROUPED_GEMM_SELECT = (*GROUPED_GEMM_EDGES, "--set", "DECODE=select", "--set", "SMALL_PRODUCT=rows")
# K split over 4 programs a tile (SPLIT_K, shipped since the H100's sweep), last program
# first: the partials summed by the tile's last, the counter set back for the next call
GEMM_SPLIT_K = ("triton_dense_gemm_bf16_nt_bias_n384_k1536", "--set", "SPLIT_K=4", "--reversed")
# The router's decode GEMV summed across the warps at each of its five steps of D
# (DECODE_SUM "each", as first judged; the shipped "once" sums once after them: one that
# leaves out the last step fails both outputs), M 3
ROUTER_SUM_EACH = (
    "triton_moe_router_gemm_topk_deepseek41_d5120_e384_topk6",
    "--uuid",
    "8fb5668d-9ace-5884-ae82-5cfb3e534ef0",
    "--set",
    "DECODE_SUM=each",
)
# A short prefill's one tile of keys taken untested, its loads with the queries' (ORDER
# "diagonal", the sweep's): the default pair (25 tokens each)
BLOCK_CAUSAL_DIAGONAL = (
    "triton_prefix_cached_block_causal_h32_d128_prefix0",
    "--set",
    "ORDER=diagonal",
)
# the image blocks' edges with the ids scanned 32 at a time (several windows a run; the
# shipped SCAN 1024 takes each run in one): a query tile that lies in one image takes the
# keys up to the last whole tile before the end of the image's run untested (in the second
# input, 128-191 takes 192-255 so); text tiles scan nothing
BLOCK_CAUSAL_SCANNED = (*BLOCK_CAUSAL_IMAGES, "--set", "SCAN=32")
# Kernels whose programs share scratch (selection candidates, splits): run last program
# first as well, where a program writing what another still reads fails. The QSA index as
# first written stored its kept keys over an earlier row's (passing in forward order only).
REVERSED = {
    "triton_qsa_index_topk_decode_qwen38_h4_d128_topk512_c4": ("--reversed",),
    "triton_mixed_mla_decode_deepseek41_h64_d512_k8128_k4512": ("--edges", "--reversed"),
    "triton_noncausal_dense_attention_h32_d64": ("--edges", "--reversed"),
}
# Our calls' later kernels launched with programmatic dependent launch (PDL True, for the
# GPU's sweep): kernel_check --pdl emulates it, each program of such a kernel reading what
# the kernel ahead wrote as poison until its gdc_wait (a router whose _select reads the
# scores before its wait fails both outputs); the QSA index's edges take all three kernels
PDL_CHECKS = {
    "triton_moe_router_gemm_topk_deepseek41_d5120_e384_topk6": ("--smallest",),
    "triton_mixed_mla_decode_deepseek41_h64_d512_k8128_k4512": ("--smallest",),
    "triton_qsa_index_topk_decode_qwen38_h4_d128_topk512_c4": ("--edges", "--set", "SEGMENT=1024"),
    "triton_chunked_gdn_prefill_qk4_v8_d128_k_last": GDN_CHUNKS[1:],
    "triton_qsa_sparse_gqa_decode_qwen38_h24_kv2_d256_topk512_c4": ("--smallest",),
}
PDL_SET = ("--set", "PDL=True", "--pdl", "--poison")
PDL_SELFTEST = ("-", "--pdl", "--pdl-selftest")
FIXED = {
    "test_the_pdl_emulation_poisons_what_the_kernel_ahead_wrote_until_its_wait": PDL_SELFTEST,
    "test_the_routers_tensor_core_path": ROUTER_TILED,
    "test_the_routers_tensor_core_path_splits_d": ROUTER_SPLIT_K,
    "test_the_routers_sums_by_torch_mm": ROUTER_CUBLAS,
    "test_the_chunked_gdn_carries_the_state_across_chunks": GDN_CHUNKS,
    "test_the_chunked_gdn_takes_short_calls_token_by_token": GDN_SHORT,
    "test_the_chunked_gdn_token_by_token_in_the_states_layout": GDN_SHORT_ROWS,
    "test_the_chunked_gdn_kernels_on_empty_and_uneven_sequences": GDN_CHUNKED_EDGES,
    "test_the_qsa_sparse_decode_merges_every_split": QSA_SPARSE_SPLITS,
    "test_the_qsa_sparse_decode_takes_smaller_splits_where_the_gpu_would_idle": QSA_SPARSE_FEW,
    "test_the_qsa_sparse_decode_with_its_ids_masked": QSA_SPARSE_MASKED,
    "test_a_wrong_kernel_fails_the_same_check": WRONG_SCALE,
    "test_gdn_decode_in_the_states_layout": GDN_DECODE_ROWS,
    "test_qsa_index_ties_at_the_cut": QSA_TIES,
    "test_qsa_index_scores_with_queries_moved_into_the_keys_layout": QSA_QUERY_VECTORS,
    "test_qsa_index_ties_with_its_keys_reloaded": QSA_TIES_RELOADED,
    "test_qsa_index_holds_more_than_4096_candidates": QSA_CANDIDATES_HELD,
    "test_qsa_index_reads_its_candidates_in_chunks": QSA_CANDIDATES_CHUNKED,
    "test_block_causal_image_blocks_across_tiles": BLOCK_CAUSAL_IMAGES,
    "test_block_causal_takes_an_image_run_untested": BLOCK_CAUSAL_SCANNED,
    "test_neighborhood_attention_in_boxes_of_32_queries": NA_BOXES_32,
    "test_neighborhood_attention_in_boxes_of_16_queries": NA_BOXES_16,
    "test_mixed_mla_pages_and_empty_requests": MIXED_MLA_PAGES,
    "test_grouped_gemm_small_shapes": GROUPED_GEMM_SELECT,
    "test_grouped_gemm_decode_by_shifts_and_swapped_product": GROUPED_GEMM_EDGES,
    "test_grouped_gemm_tiles_planned_by_torch": GROUPED_GEMM_PLAN,
    "test_grouped_gemm_scales_from_the_steps_table": GROUPED_GEMM_TABLE,
    "test_the_bias_gemm_splits_k_in_one_kernel": GEMM_SPLIT_K,
    "test_the_routers_decode_sums_its_products_at_every_step": ROUTER_SUM_EACH,
    "test_block_causal_short_prefill_in_one_round_of_loads": BLOCK_CAUSAL_DIAGONAL,
}


def _kernel_arguments(name: str) -> tuple[str, ...] | None:
    """What the interpreter check of kernel ``name`` runs (None: another's source)."""
    if name in SAME_SOURCE:
        return None
    if name in FABRICATED:
        return (name, "--axes", ",".join(f"{k}={v}" for k, v in FABRICATED[name].items()))
    wider = ["--set", WIDER_TILES[name]] if name in WIDER_TILES else []
    return (name, *(["--smallest"] if name in SMALLEST_ONLY else []), *wider)


def _planned(item: pytest.Item) -> tuple[str, ...] | None:
    params = getattr(item, "callspec", None)
    name = params.params.get("name") if params is not None else None
    if item.originalname == "test_kernel_matches_the_reference_in_the_interpreter":
        return _kernel_arguments(name)
    if item.originalname in ("test_sparse_mla_edges", "test_dense_attention_splits_the_keys"):
        return (name, "--edges")
    if item.originalname == "test_programs_in_reverse_order":
        return (name, *REVERSED[name])
    if item.originalname == "test_later_kernels_launched_with_pdl_wait_for_the_kernel_ahead":
        return (name, *PDL_CHECKS[name], *PDL_SET)
    return FIXED.get(item.originalname)


@pytest.fixture(scope="module", autouse=True)
def _started_together(request):
    if importlib.util.find_spec("triton") is None:
        return
    for item in request.session.items:
        if item.module is request.module and (arguments := _planned(item)) is not None:
            _start(arguments)


def _start(arguments: tuple[str, ...]) -> concurrent.futures.Future:
    if arguments not in _STARTED:
        _STARTED[arguments] = POOL.submit(_run, arguments)
    return _STARTED[arguments]


def _checked(*arguments: str) -> list[dict]:
    pytest.importorskip("triton")
    return _start(arguments).result()


def _run(arguments: tuple[str, ...]) -> list[dict]:
    return _interpreted(str(HERE / "kernel_check.py"), *arguments)


def _interpreted(*arguments: str) -> list:
    """The last line of Python's output given ``arguments`` (a script or -c code), as JSON:
    in Triton's interpreter, with this folder importable. At the lowest priority (``nice``
    19): under pytest-xdist the other worker's tests, some of whose verdicts ride on CPU
    timings, take the two cores first, and these checks take what they leave (CI at 6c8160a:
    beside them a graph's samples were judged too short and taken again, on sets made a
    third time)."""
    environment = {**os.environ, "TRITON_INTERPRET": "1"}
    environment["PYTHONPATH"] = os.pathsep.join([str(HERE), environment.get("PYTHONPATH", "")])
    done = subprocess.run(
        ["nice", "-n", "19", sys.executable, *arguments],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# Kernels under kernel_check's bounds check: a copy in bounds, with its masked-off lanes past
# the end, through a tuple of tensors, and one element past the end (a load, a store, a load
# with the arguments by name); a scalar load and an atomic one element past the end
BOUNDS_PROBE = """
import json
import torch, triton, triton.language as tl
from kernel_check import check_bounds

@triton.jit
def copy(src, dst, n, load_past, store_past, BLOCK: tl.constexpr):
    at = tl.arange(0, BLOCK)
    value = tl.load(src + at + load_past, mask=at < n, other=0.0)
    tl.store(dst + at + store_past, value, mask=at < n)

@triton.jit
def copy_pair(pair, BLOCK: tl.constexpr):
    at = tl.arange(0, BLOCK)
    tl.store(pair[1] + at, tl.load(pair[0] + at))

@triton.jit
def one(src, dst, at):
    tl.store(dst, tl.load(src + at))

@triton.jit
def count(dst, at):
    tl.atomic_add(dst + at, 1.0)

check_bounds()
src, dst = torch.arange(8.0), torch.zeros(8)
launches = [
    lambda: copy[(1,)](src, dst, 8, 0, 0, BLOCK=16),
    lambda: copy[(1,)](src, dst, 7, 1, 1, BLOCK=16),
    lambda: copy_pair[(1,)]((src, dst), BLOCK=8),
    lambda: copy[(1,)](src, dst, 8, 1, 0, BLOCK=16),
    lambda: copy[(1,)](src, dst, 8, 0, 1, BLOCK=16),
    lambda: copy[(1,)](src=src, dst=dst, n=8, load_past=1, store_past=0, BLOCK=16),
    lambda: one[(1,)](src, dst, 8),
    lambda: count[(1,)](dst, 8),
]
found = []
for launch in launches:
    try:
        launch()
        found.append("ok")
    except Exception as error:
        found.append(str(error))
print(json.dumps(found))
"""


def test_the_interpreter_checks_every_access_stays_in_a_tensor():
    pytest.importorskip("triton")
    found = _interpreted("-c", BOUNDS_PROBE)
    assert found[:3] == ["ok", "ok", "ok"], found
    load, store, named, scalar, atomic = found[3:]
    assert "create_masked_load: 1 of 8 addresses outside every tensor argument" in load, load
    assert "the first at byte 32 of the nearest, a 32-byte tensor" in load, load
    assert "create_masked_store: 1 of 8 addresses outside every tensor argument" in store, store
    assert "create_masked_load: 1 of 8 addresses outside" in named, named
    assert "create_masked_load: 1 of 1 addresses outside" in scalar, scalar
    assert "create_atomic_rmw: 1 of 1 addresses outside" in atomic, atomic


def _solution_module(name: str, folder: Path):
    """Solution ``name``'s source imported as a module (from a file in ``folder``: Triton's
    jit reads its function's file), for its host-side rules."""
    path = folder / "solution_main.py"
    path.write_text(DATASET_INDEX.solutions[name].sources[0].content)
    spec = importlib.util.spec_from_file_location(f"{name}_main", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_there_are_kernels_to_check():
    assert "triton_gdn_decode_qk4_v8_d128_k_last" in KERNELS


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_matches_the_reference_in_the_interpreter(name):
    solution = DATASET_INDEX.solutions[name]
    assert solution.spec.destination_passing_style
    assert "cpu" not in solution.spec.target_hardware  # not judged on the CPU by default
    if name in SAME_SOURCE:
        other = DATASET_INDEX.solutions[SAME_SOURCE[name]]
        assert solution.sources == other.sources and other.name in KERNELS
        return
    found = _checked(*_kernel_arguments(name))
    if name in FABRICATED:
        assert len(found) == 1 and FABRICATED[name].items() <= found[0]["axes"].items(), found
    else:
        assert len(found) == (1 if name in SMALLEST_ONLY else 2), found  # and the next dev one
    for case in found:
        assert all(case["verdicts"]) and case["inputs_unchanged"], (name, case)


def test_the_routers_tensor_core_path():
    (case,) = _checked(*ROUTER_TILED)
    assert case["axes"] == {"M": 128}
    assert all(case["verdicts"]) and case["inputs_unchanged"], case


@pytest.mark.parametrize("name", list(PDL_CHECKS))
def test_later_kernels_launched_with_pdl_wait_for_the_kernel_ahead(name):
    cases = _checked(name, *PDL_CHECKS[name], *PDL_SET)
    assert cases and all(all(case["verdicts"]) for case in cases), cases


def test_the_pdl_emulation_poisons_what_the_kernel_ahead_wrote_until_its_wait():
    found = _checked(*PDL_SELFTEST)
    assert found["waits"] == {"read_the_values": True, "read_poison": False, "restored": True}
    assert found["reads_early"] == {"read_the_values": False, "read_poison": True, "restored": True}


def test_the_routers_tensor_core_path_splits_d():
    (case,) = _checked(*ROUTER_SPLIT_K)
    assert case["axes"] == {"M": 128}
    assert case["verdicts"] == [True, True] and case["inputs_unchanged"], case


def test_the_routers_sums_by_torch_mm():
    (case,) = _checked(*ROUTER_CUBLAS)
    assert case["axes"] == {"M": 128}
    assert case["verdicts"] == [True, True] and case["inputs_unchanged"], case


def test_the_chunked_gdn_carries_the_state_across_chunks():
    (case,) = _checked(*GDN_CHUNKS)
    assert case["axes"] == {"total_seq_len": 239, "num_seqs": 3, "len_cu_seqlens": 4}
    assert all(case["verdicts"]) and case["inputs_unchanged"], case


def test_the_chunked_gdn_kernels_on_empty_and_uneven_sequences():
    assert [case["verdicts"] for case in _checked(*GDN_CHUNKED_EDGES)] == [[True, True]] * 2


def test_the_chunked_gdn_takes_short_calls_token_by_token(tmp_path):
    assert [case["verdicts"] for case in _checked(*GDN_SHORT)] == [[True, True]] * 2
    # which kernels run() launches, by the call's tokens (no kernel runs: each launch is
    # recorded by its name and grid)
    module = _solution_module(GDN_SHORT[0], tmp_path)
    launched = []

    class Kernel:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            return lambda *args, **kwargs: launched.append((self.name, grid))

    for name in ("_recurrent", "_chunk_prepare", "_chunk_recur"):
        setattr(module, name, Kernel(name))
    shipped = module.SHORT_TOKENS, module.SHORT_ROWS
    module.SHORT_TOKENS, module.SHORT_ROWS = 64, 8

    def call(tokens, sequences):
        q, v = torch.zeros(tokens, 4, 128), torch.zeros(tokens, 8, 128)
        cu_seqlens = torch.zeros(sequences + 1, dtype=torch.int64)
        gates = torch.zeros(tokens, 8)
        launched.clear()
        module.run(q, q, v, None, None, gates, None, gates, cu_seqlens, None, v, None)
        return list(launched)

    assert call(64, 3) == [("_recurrent", (24, 16))]
    assert [name for name, _ in call(65, 3)] == ["_chunk_prepare", "_chunk_recur"]
    assert [name for name, _ in call(0, 1)] == ["_chunk_prepare", "_chunk_recur"]
    module.SHORT_TOKENS = 0  # never
    assert [name for name, _ in call(6, 1)] == ["_chunk_prepare", "_chunk_recur"]
    # as shipped since the H100's sweep: up to 80 tokens, 4 state rows a program
    module.SHORT_TOKENS, module.SHORT_ROWS = shipped
    assert call(80, 2) == [("_recurrent", (16, 32))]
    assert [name for name, _ in call(81, 2)] == ["_chunk_prepare", "_chunk_recur"]


def test_the_chunked_gdn_token_by_token_in_the_states_layout():
    assert [case["verdicts"] for case in _checked(*GDN_SHORT_ROWS)] == [[True, True]] * 2


def test_the_qsa_sparse_decode_merges_every_split():
    (case,) = _checked(*QSA_SPARSE_SPLITS)
    assert case["axes"]["MP"] == 3193 and case["verdicts"] == [True], case
    assert case["inputs_unchanged"]


def test_the_qsa_sparse_decode_with_its_ids_masked():
    (case,) = _checked(*QSA_SPARSE_MASKED)
    assert case["axes"]["MP"] == 3193 and case["verdicts"] == [True], case


def test_the_qsa_sparse_decode_takes_smaller_splits_where_the_gpu_would_idle(tmp_path):
    # At B 1 its two KV heads' 33 splits of 64 are 66 programs for an H200's 132
    # multiprocessors: splits of 32 (65 a head, all holding tokens here) were the faster
    # there, 64 from B 2 on. The rule, and run() taking it (scratch, partials and merge
    # sized by the split it chose) in the interpreter.
    splitting = _solution_module(QSA_SPARSE_SPLITS[0], tmp_path).splitting
    assert [splitting(heads, 2051, 132) for heads in (2, 4, 40)] == [32, 64, 64]
    assert splitting(2, 2051, None) == 64 and splitting(2, 2051, 66) == 64
    (case,) = _checked(*QSA_SPARSE_FEW)
    assert case["axes"]["MP"] == 3193 and case["verdicts"] == [True], case


def test_a_wrong_kernel_fails_the_same_check():
    # The GDN decode kernel given another scale than the reference's: the output is off,
    # the state (which the scale does not touch) still passes.
    (case,) = _checked(*WRONG_SCALE)
    assert case["verdicts"] == [False, True]


def test_gdn_decode_in_the_states_layout():
    (case,) = _checked(*GDN_DECODE_ROWS)
    assert case["axes"] == {"batch_size": 32}
    assert case["verdicts"] == [True, True] and case["inputs_unchanged"], case
    found = _checked(*GDN_DECODE_VECTORS)
    assert [case["axes"] for case in found] == [{"batch_size": 1}] * 2, found
    assert [case["verdicts"] for case in found] == [[True, True]] * 2, found


@pytest.mark.parametrize("name", [k for k in KERNELS if "sparse_mla" in k])
def test_sparse_mla_edges(name):
    # No valid key (zeros whatever the sink), skipped indices, a single valid key: what
    # the stand-ins rarely reach.
    (case,) = _checked(name, "--edges")
    assert case["verdicts"] == [True], case


@pytest.mark.parametrize("name", [k for k in KERNELS if "noncausal_dense_attention" in k])
def test_dense_attention_splits_the_keys(name):
    # 5 queries over 300 keys, 2 x 70 over 1,000: the keys split and merged (the captured
    # workloads small enough for the interpreter never split); a merge that leaves out a
    # split or does not rescale fails these
    found = _checked(name, "--edges")
    assert [case["verdicts"] for case in found] == [[True], [True]], found


@pytest.mark.parametrize("name", sorted(REVERSED))
def test_programs_in_reverse_order(name):
    found = _checked(name, *REVERSED[name])
    assert found and all(all(case["verdicts"]) for case in found), found


def test_qsa_index_scores_with_queries_moved_into_the_keys_layout():
    found = _checked(*QSA_QUERY_VECTORS)
    assert [case["axes"]["NP"] for case in found] == [2, 132], found
    assert [case["verdicts"] for case in found] == [[True]] * 2, found


def test_qsa_index_ties_at_the_cut():
    # Cuts inside runs of exact zeros and of equal positive scores (lowest ids win), a row
    # of exactly 512 blocks and a short one; then rows wider than one selecting program
    # (each segment's top 512, then theirs), cuts among zeros spread over three segments
    # and among distinct positives. A kernel whose ties go to higher ids, that scores relu
    # of the summed heads, keeps only the first segment's top or passes the segments'
    # candidates on without their keys fails one of them.
    _qsa_cuts(QSA_TIES)


def _qsa_cuts(arguments):
    found = _checked(*arguments)
    assert [case["verdicts"] for case in found] == [[True], [True]], found


def test_qsa_index_ties_with_its_keys_reloaded():
    # The same cuts with KEYS = "reload" (each selecting program reads its keys again for
    # every pass, as first judged; shipped since the H100's sweep: "held", read once and
    # kept in registers across the passes, where a variant that forgets the ties already
    # above the cut fails the test above).
    _qsa_cuts(QSA_TIES_RELOADED)


def test_qsa_index_holds_more_than_4096_candidates():
    # The same cuts where the wide rows' second stage holds its 4,608 candidates in
    # registers (one chunk of 8,192, shipped).
    _qsa_cuts(QSA_CANDIDATES_HELD)


def test_qsa_index_reads_its_candidates_in_chunks():
    # The same second stage in two chunks of 4,096, read again for every pass.
    _qsa_cuts(QSA_CANDIDATES_CHUNKED)


def _na_boxes(arguments):
    (case,) = _checked(*arguments)
    assert case["axes"] == {"B": 1, "T": 5, "Y": 9, "X": 11}, case
    assert case["verdicts"] == [True] and case["inputs_unchanged"], case


def test_neighborhood_attention_in_boxes_of_32_queries():
    _na_boxes(NA_BOXES_32)


def test_neighborhood_attention_in_boxes_of_16_queries():
    _na_boxes(NA_BOXES_16)


def test_block_causal_image_blocks_across_tiles():
    # The stand-in workloads small enough for the interpreter are text only (causal): here
    # two image blocks, one across a tile boundary, between runs of text.
    found = _checked(*BLOCK_CAUSAL_IMAGES)
    assert [case["verdicts"] for case in found] == [[True], [True]], found


def test_block_causal_takes_an_image_run_untested(tmp_path):
    # a scan that runs on past the image (the text keys after it taken as seen), or stops
    # after its first window, or takes a text tile (id -1) for an image, fails here; one that
    # rounds the run's end up reads past the keys (the bounds check)
    found = _checked(*BLOCK_CAUSAL_SCANNED)
    assert [case["verdicts"] for case in found] == [[True], [True]], found
    # calls of one tile of keys or fewer tokens are compiled without the scan
    module = _solution_module(BLOCK_CAUSAL_SCANNED[0], tmp_path)
    assert [module.scans(n) for n in (25, 64, 65, 4125)] == [False, False, True, True]


def test_poison_fills_what_torch_empty_returns(monkeypatch):
    # kernel_check.py --poison: a kernel reading scratch it never wrote reads NaN (or -1)
    import kernel_check

    monkeypatch.setattr(torch, "empty", torch.empty)  # (put back after the test)
    monkeypatch.setattr(torch, "empty_like", torch.empty_like)
    kernel_check.poison_empty()
    assert torch.empty(2, 3).isnan().all()
    assert torch.empty_like(torch.zeros(4, dtype=torch.int32)).tolist() == [-1] * 4
    assert torch.empty(2, dtype=torch.bool).all()


def test_mixed_mla_pages_and_empty_requests():
    # The stand-ins small enough for the interpreter have one page of each cache: here five
    # FP4 pages and two FP8 ones (a page's scale rows after its data rows), a request with
    # no valid token (zeros), FP8 tokens only, one FP4 token on the last page.
    (case,) = _checked(*MIXED_MLA_PAGES)
    assert case["verdicts"] == [True], case


def test_grouped_gemm_small_shapes():
    # Rows of several experts in one tile and of one expert across tiles, an expert with no
    # rows between two others (a kernel that stores every row of the tile for each expert,
    # swaps the nibbles or misreads a scale fails these).
    found = _checked(*GROUPED_GEMM_SELECT)
    assert [case["verdicts"] for case in found] == [[True]] * 3, found


def test_grouped_gemm_decode_by_shifts_and_swapped_product():
    # The same shapes with the weights decoded by shifts and masks (DECODE = "shift": each
    # value times 2^-6, the sum times 2^6 at the end; in the interpreter the plain Triton
    # operations the GPU's PTX does four bytes at a time) and the small tiles' product
    # taken as W A^T, stored transposed (SMALL_PRODUCT = "swap"). Dropping the 2^6, a shift
    # off by one, or the row scales of the swapped product fails these.
    found = _checked(*GROUPED_GEMM_EDGES)  # (as n5120 ships since the H200's sweep)
    assert [case["verdicts"] for case in found] == [[True]] * 3, found


def test_grouped_gemm_tiles_planned_by_torch():
    # The same shapes with the tiles found by torch.searchsorted and torch.cumsum (PLAN
    # "torch", as first judged). Shipped since the H100's sweep, each expert's first row by
    # a binary search and the tiles' running sum by tl.cumsum in one program (_plan), the
    # two tests above: an expert with no rows between two others and one expert's rows
    # across tiles fail a search off by one or a sum that counts an empty expert's tile.
    found = _checked(*GROUPED_GEMM_PLAN)
    assert [case["verdicts"] for case in found] == [[True]] * 3, found


def test_grouped_gemm_scales_from_the_steps_table():
    for arguments in (GROUPED_GEMM_TABLE, GROUPED_GEMM_ROWS):
        found = _checked(*arguments)
        assert [case["verdicts"] for case in found] == [[True]] * 3, (arguments, found)


def test_the_bias_gemm_splits_k_in_one_kernel():
    # M 5, then M 11 on the same scratch (both in tiles of 16 rows): the second passes only
    # if the first call's last program set the tiles' counters back to 0 (without it: M 11
    # fails); a last program that adds its own partial alone fails both, and so does a
    # program that reduces before the others have counted (the counter, set back by
    # subtraction, is then never 0 again: in the interpreter's one-at-a-time order a reset
    # to 0 would let every program reduce in turn and the last one's result stand).
    found = _checked(*GEMM_SPLIT_K)
    assert [case["axes"] for case in found] == [{"M": 5}, {"M": 11}], found
    assert [case["verdicts"] for case in found] == [[True], [True]], found


def test_the_routers_decode_sums_its_products_at_every_step():
    (case,) = _checked(*ROUTER_SUM_EACH)
    assert case["axes"] == {"M": 3} and case["verdicts"] == [True, True], case


def test_block_causal_short_prefill_in_one_round_of_loads(tmp_path):
    # 25 tokens, one tile of keys, taken untested instead of by the loops (one_tile: only
    # where the tokens fit one tile of queries and of keys, as the kernel's branch assumes):
    # a kernel whose branch leaves the tile out fails both
    module = _solution_module(BLOCK_CAUSAL_DIAGONAL[0], tmp_path)
    assert not module.one_tile(25)  # shipped: "keys"
    module.ORDER = "diagonal"
    assert [module.one_tile(n) for n in (25, 64, 65)] == [True, True, False]
    module.BLOCK_M = 32
    assert not module.one_tile(33)
    found = _checked(*BLOCK_CAUSAL_DIAGONAL)
    assert [case["axes"]["Nq"] for case in found] == [25, 25], found
    assert [case["verdicts"] for case in found] == [[True], [True]], found
