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
    # The QSA index as first written: `digit` a [CHUNK] tensor in the loop, then a scalar.
    solution = DATASET_INDEX.solutions[QSA]
    source = solution.sources[0].content
    broken = source.replace("digits = ((key", "digit = ((key").replace(
        "tl.histogram(digits,", "tl.histogram(digit,"
    )
    assert broken != source
    changed = solution.model_copy(
        update={"sources": [solution.sources[0].model_copy(update={"content": broken})]}
    )
    launches = [
        x
        for x in tool.recorded_launches(DATASET_INDEX, changed, "first")
        if x["kernel"].fn.__name__ == "_select"
    ]
    with pytest.raises(Exception, match="Loop-carried variable digit"):
        tool.compiled(launches[0])
