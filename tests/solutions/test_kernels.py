"""Our own kernels in dataset/solutions (Triton; issue 14), checked on the CPU through
Triton's interpreter (``TRITON_INTERPRET=1``, in a process of its own: kernel_check.py):
on each definition's smallest workload and its next-smallest dev one (stand-in inputs)
each output passes the task's acceptance check against the FP32 reference and the inputs
stay byte-identical; a kernel that is off (a wrong scale) fails the same check. Their
speed, and every dev workload, are the H200's business (``run --device cuda``): the
interpreter says nothing of either."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_baselines import DATASET_INDEX

HERE = Path(__file__).resolve().parent
KERNELS = sorted(s.name for s in DATASET_INDEX.solutions.values() if s.spec.language == "triton")
# Checked on the smallest workload only (and on hand-made edges, below): the interpreter
# took 3 minutes on the next one of k640 (448 tokens of 640 keys each), 35 s on k128's.
SMALLEST_ONLY = {
    "triton_sparse_mla_prefill_h64_d512_k128",
    "triton_sparse_mla_prefill_h64_d512_k640",
}


def _checked(*arguments: str) -> list[dict]:
    pytest.importorskip("triton")
    environment = {**os.environ, "TRITON_INTERPRET": "1"}
    environment["PYTHONPATH"] = os.pathsep.join([str(HERE), environment.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(HERE / "kernel_check.py"), *arguments],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_there_are_kernels_to_check():
    assert "triton_gdn_decode_qk4_v8_d128_k_last" in KERNELS


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_matches_the_reference_in_the_interpreter(name):
    solution = DATASET_INDEX.solutions[name]
    assert solution.spec.destination_passing_style
    assert "cpu" not in solution.spec.target_hardware  # not judged on the CPU by default
    found = _checked(name, *(["--smallest"] if name in SMALLEST_ONLY else []))
    assert len(found) == (1 if name in SMALLEST_ONLY else 2), found  # and the next dev one
    for case in found:
        assert all(case["verdicts"]) and case["inputs_unchanged"], (name, case)


def test_the_routers_tensor_core_path():
    # The smallest workloads are decode (M=1: the GEMV path); M=128 takes the tiled one.
    (case,) = _checked(
        "triton_moe_router_gemm_topk_deepseek41_d5120_e384_topk6",
        "--uuid",
        "7414061c-d565-5448-9e7a-78d5b1ebfdb4",
    )
    assert case["axes"] == {"M": 128}
    assert all(case["verdicts"]) and case["inputs_unchanged"], case


def test_a_wrong_kernel_fails_the_same_check():
    # The GDN decode kernel given another scale than the reference's: the output is off,
    # the state (which the scale does not touch) still passes.
    (case,) = _checked("triton_gdn_decode_qk4_v8_d128_k_last", "--wrong-scale")
    assert case["verdicts"] == [False, True]


@pytest.mark.parametrize("name", [k for k in KERNELS if "sparse_mla" in k])
def test_sparse_mla_edges(name):
    # No valid key (zeros whatever the sink), skipped indices, a single valid key: what
    # the stand-ins rarely reach.
    (case,) = _checked(name, "--edges")
    assert case["verdicts"] == [True], case
