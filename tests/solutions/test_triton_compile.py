"""scripts/triton_compile.py: our Triton kernels compiled for the H200 (sm_90) on a machine
without a GPU, from the launches their entry point makes on the dev workloads. What the
interpreter checks (tests/solutions/test_kernels.py) cannot show: that a kernel compiles
at all. The QSA index kernel is the case in point: a loop-carried value that changed type
ran in the interpreter and did not compile."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
from test_baselines import DATASET_INDEX  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
QSA = "triton_qsa_index_topk_decode_qwen38_h4_d128_topk512_c4"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location(
        "triton_compile", ROOT / "scripts/triton_compile.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["triton_compile"] = module
    spec.loader.exec_module(module)
    return module


def test_every_launch_of_the_qsa_index_compiles_for_sm90(tool):
    launches = tool.recorded_launches(DATASET_INDEX, DATASET_INDEX.solutions[QSA], "dev", 90)
    found = [tool.compiled(launch) for launch in launches]
    kernels = sorted({(entry["kernel"], entry["constexprs"].get("GIVEN")) for entry in found})
    # scoring, one-stage selection, and both stages of wide rows (B 1 of 62,320 blocks)
    assert kernels == [("_scores", None), ("_select", False), ("_select", True)], kernels
    segments = {e["constexprs"]["SEGMENT"] for e in found if e["kernel"] == "_select"}
    assert {512, 2048, 4096} <= segments, segments
    for entry in found:
        assert 0 < entry["registers"] <= 255 and entry["stack_bytes"] == 0, entry


def test_a_kernel_that_does_not_compile_is_named(tool):
    # The QSA index as first written: `digit` a scalar, then a [CHUNK] tensor in the loop
    # over a segment's chunks (the KEYS = "reload" path, as first judged).
    solution = DATASET_INDEX.solutions[QSA]
    source = solution.sources[0].content
    outer, inner = " " * 20, " " * 24  # (the pass's body, the chunks' loop body)
    before = f"\n{outer}counted = tl.zeros((BINS,), tl.int32)\n"
    loop_body = f"\n{inner}counted += _digit_counts("
    assert source.count(before) == 1 and source.count(loop_body) == 1
    broken = source.replace(before, f"{before}{outer}digit = tl.zeros((), tl.int32)\n")
    broken = broken.replace(loop_body, f"\n{inner}digit = key.to(tl.int32){loop_body}")
    changed = solution.model_copy(
        update={"sources": [solution.sources[0].model_copy(update={"content": broken})]}
    )
    launches = [
        x
        for x in tool.recorded_launches(
            DATASET_INDEX, changed, "first", settings={"KEYS": "reload"}
        )
        if x["kernel"].fn.__name__ == "_select"
    ]
    with pytest.raises(Exception, match="Loop-carried variable digit"):
        tool.compiled(launches[0])


GROUPED = "triton_grouped_gemm_fp8_fp4_e384_n5120_k2304_g32"


def test_the_machine_code_says_which_tensor_core_product_a_setting_gets(tool):
    # The grouped GEMM's decode tiles (16 rows at M 6): with its product as A W^T
    # (SMALL_PRODUCT "rows"), sm_90 gets a warp's FP16 mma.sync with both FP8 operands
    # converted (a wgmma needs 64 rows); taken as W A^T ("swap") an FP8 wgmma, and the shift
    # decode fewer integer instructions. What `--set` and the SASS counts are for.
    solution = DATASET_INDEX.solutions[GROUPED]

    def products(**settings):  # (the tiles' plan, PLAN "kernel", is a launch of its own)
        launches = tool.recorded_launches(DATASET_INDEX, solution, settings=settings)
        return [tool.compiled(x) for x in launches if x["kernel"].fn.__name__ == "_grouped_gemm"]

    first = products(SMALL_PRODUCT="rows", DECODE="select")  # as first judged
    swapped = products(SMALL_PRODUCT="swap", DECODE="shift")
    assert len(first) == len(swapped) == 1
    before, after = first[0]["sass"], swapped[0]["sass"]
    assert set(before["tensor_core"]) == {"HMMA"} and set(after["tensor_core"]) == {"QGMMA"}
    assert before["conversions"].get("F2FP", 0) >= 32 > after["conversions"].get("F2FP", 0)
    assert after["integer"] < 0.6 * before["integer"]
    assert after["instructions"] < before["instructions"]
    with pytest.raises(ValueError, match="no module constant NOPE"):
        tool.recorded_launches(DATASET_INDEX, solution, settings={"NOPE": "1"})


def test_every_instruction_is_counted_past_64_kb_of_code(tool):
    # (cuobjdump's address comment grows a fifth digit; the encoding comment is no opcode)
    sass = """
        /*fff0*/                   HGMMA.64x32x16.F32.BF16 R24, gdesc[UR4], RZ ;  /* 0x0 */
        /*10000*/              @!P0 BAR.SYNC.DEFER_BLOCKING 0x0 ;                 /* 0x0 */
        /*10010*/                   EXIT ;                                         /* 0x0 */
    """
    assert tool.opcodes(sass) == ["HGMMA", "BAR", "EXIT"]
