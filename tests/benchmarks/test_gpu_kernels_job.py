"""scripts/gpu_kernels_job.sh's parts judge every solution of the dataset beside its task
baseline: a solution that no part picks would cost a session's GPU time to notice."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("kernel_picks", ROOT / "scripts/kernel_picks.py")
kernel_picks = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(kernel_picks)
ALL_PARTS = "a b na natten compile"


def _listed(names: str) -> list[list[str]]:
    listed = subprocess.run(
        ["bash", str(ROOT / "scripts/gpu_kernels_job.sh")],
        cwd=ROOT,
        env={**os.environ, "LIST": "1", "PARTS": names},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line.split() for line in listed.splitlines()]


def _parts(names: str) -> dict[str, tuple[str, str]]:
    return {name: (kernels, solutions) for name, kind, kernels, solutions in _listed(names)}


def _judged(kernels: str, solutions: str) -> dict[str, set[str]]:
    """definition -> the solutions a part with these expressions judges"""
    options = kernel_picks.picks(ROOT / "dataset", kernels, solutions)
    judged: dict[str, set[str]] = {}
    for option, value in zip(options[::2], options[1::2], strict=True):
        if option == "-d":
            definition = judged.setdefault(value, set())
        else:
            definition.add(value)
    return judged


def test_the_parts_judge_every_solution_beside_its_baseline():
    solutions = kernel_picks.solution_definitions(ROOT / "dataset")
    covered: set[str] = set()
    part_of: dict[str, str] = {}  # each solution but a baseline judged in one part only
    for name, (kernels, chosen) in _parts(ALL_PARTS).items():
        for definition, judged in _judged(kernels, chosen).items():
            baseline = f"torch_{definition}"
            for solution in judged - {baseline}:
                assert part_of.setdefault(solution, name) == name, (solution, part_of[solution])
            assert baseline in judged, (name, definition)  # paired with it in its own part
            assert all(solutions[s] == definition for s in judged)
            covered |= judged
    # every solution, the baselines of the definitions that have no other (the plain GEMMs:
    # their speed of light is cuBLAS's, and the table's is every definition's) too
    assert covered == set(solutions)
    assert "torch_dense_gemm_bf16_nt_n4096_k4096" in covered
    assert {"natten_neighborhood_attention_3d_h4_d64_kt11_ky11_kx11"} <= covered


def test_the_default_parts_leave_out_only_natten():
    default = _parts("b a na compile")
    covered = set().union(*(set().union(*_judged(*p).values()) for p in default.values()))
    left = {
        s
        for s in kernel_picks.solution_definitions(ROOT / "dataset")
        if s not in covered and not s.startswith("torch_")
    }
    assert left == {
        s for s in kernel_picks.solution_definitions(ROOT / "dataset") if s.startswith("natten_")
    }
    assert len(left) == 4


def test_the_two_sweeps_take_every_planned_line_once():
    sweeps = {name: re.compile(pattern) for name, kind, pattern in _listed("v1 v2")}
    lines = (ROOT / "benchmarks/variants.txt").read_text().splitlines()
    planned = [line.split()[0] for line in lines if line.strip() and not line.startswith("#")]
    taken = [[name for name, pattern in sweeps.items() if pattern.search(s)] for s in planned]
    assert all(len(names) == 1 for names in taken), list(zip(planned, taken, strict=True))
    router = planned.index("triton_moe_router_gemm_topk_deepseek41_d5120_e384_topk6")
    assert {"v1"} == set(taken[router])  # the newest line


@pytest.mark.parametrize(
    ("chosen", "prefixes"),
    [
        ("^(compile_|torch_)", {"compile_", "torch_"}),
        ("^(?!compile_)", {"flashinfer_", "torch_", "triton_"}),
        (None, set()),  # no -s options: the run judges every solution of the definition
    ],
)
def test_picks_take_a_definitions_solutions_by_their_names(chosen, prefixes):
    options = kernel_picks.picks(ROOT / "dataset", "qsa_sparse", chosen)
    assert options[:2] == ["-d", "qsa_sparse_gqa_decode_qwen38_h24_kv2_d256_topk512_c4"]
    assert options[2::2] == ["-s"] * len(options[3::2])
    assert {value.split("_")[0] + "_" for value in options[3::2]} == prefixes


def test_a_definition_none_of_whose_solutions_match_is_left_out():
    assert kernel_picks.picks(ROOT / "dataset", "qsa_sparse", "^nothing") == []
