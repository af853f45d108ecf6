"""Fractions of the speed of light in reports (report/sol.py): counts from the rows, peaks
from the hardware table of the GPU the environment rows name, and none where that is
unclear."""

import pytest

from inference_kernels.report.sol import device_names, fractions
from inference_kernels.schema import Hardware

TABLE = Hardware(
    device="NVIDIA H200",
    tflops={"bf16": 800.0, "fp32": 60.0},
    memory_tb_s=4.0,
    empty_kernel_us=2.0,
    provenance={"command": "a test"},
)


def _environment(*pairs):
    devices = [{"device": d, "nvidia_smi": {"name": n}} for d, n in pairs]
    return {"type": "environment", "devices": devices}


def _case(uuid, us, work, device="cuda:0"):
    timing = {"regime": "burst", "graph": {"method": "cuda-graph", "median_us": us}}
    return {
        "type": "case",
        "definition": "d",
        "solution": "s",
        "uuid": uuid,
        "status": "passed",
        "device": device,
        "timing": timing,
        "work": work,
    }


def test_each_timed_case_with_counts_gets_its_fraction_and_bound():
    gemm = {"flops": 412_316_860_416, "bytes": 234_881_024, "math": "bf16"}
    state = {"flops": 7 * 64 * 8 * 128 * 128, "bytes": 67_108_864, "math": "fp32"}
    rows = [_environment(("cuda:0", "NVIDIA H200")), _case("a", 600.0, gemm)]
    rows += [_case("b", 33.554432, state), _case("c", 10.0, None)]
    found = fractions(rows, {"NVIDIA H200": TABLE})
    assert set(found) == {("d", "s", "a"), ("d", "s", "b")}  # c has no counts
    assert found[("d", "s", "a")]["bound"] == "compute"
    assert round(found[("d", "s", "a")]["fraction"], 4) == round(515.396076 / 600.0, 4)
    assert found[("d", "s", "b")] == {"fraction": 0.5, "bound": "memory", "limit_us": 16.777216}


def test_no_fraction_without_the_devices_table_or_with_two_gpus_named_for_it():
    gemm = {"flops": 10**12, "bytes": 10**6, "math": "bf16"}
    rows = [_environment(("cuda:0", "NVIDIA H100")), _case("a", 2000.0, gemm)]
    assert fractions(rows, {"NVIDIA H200": TABLE}) == {}
    two = [_environment(("cuda:0", "NVIDIA H200")), _environment(("cuda:0", "NVIDIA H100"))]
    assert device_names(two) == {}
    assert fractions([*two, _case("a", 2000.0, gemm)], {"NVIDIA H200": TABLE}) == {}


def test_summary_gives_each_solution_its_geomean_fraction_and_bound():
    from inference_kernels.report.summary import performance_markdown, summary

    memory = {"flops": 1, "bytes": 40_000_000, "math": "bf16"}  # 10 us at 4 TB/s
    rows = [_environment(("cuda:0", "NVIDIA H200"))]
    rows += [_case("a", 20.0, memory), _case("b", 12.5, memory)]  # 0.5 and 0.8 of light
    failed = _case("c", 10.0, memory) | {"status": "mismatch"}  # counts for nothing
    report = summary([*rows, failed], {}, {"NVIDIA H200": TABLE})
    (entry,) = report["solutions"]
    assert round(entry["sol_fraction"], 6) == round((0.5 * 0.8) ** 0.5, 6)  # 0.632456
    assert entry["bound"] == "memory"
    assert "| 0.63 (memory) |" in performance_markdown(report)
    (unknown,) = summary(rows, {}, {})["solutions"]  # no table for the GPU: no fraction
    assert unknown["sol_fraction"] is None
    # the rates achieved need no table: 40 MB in 20 and 12.5 us, 2.0 and 3.2 TB/s
    assert unknown["tb_s"] == pytest.approx((2.0 * 3.2) ** 0.5)
    assert (
        performance_markdown(summary(rows, {}, {}))
        .rstrip()
        .endswith("| - | 6.32e-08 TFLOP/s, 2.53 TB/s |")
    )


def test_compare_gives_both_sides_their_fraction_on_the_paired_workloads():
    from inference_kernels.report.compare import comparison

    memory = {"flops": 1, "bytes": 40_000_000, "math": "bf16"}  # 10 us at 4 TB/s
    rows = [_environment(("cuda:0", "NVIDIA H200"))]
    rows += [_case("a", 20.0, memory), _case("b", 12.5, memory)]  # s: 0.5, 0.8
    rows += [_case("a", 40.0, memory) | {"solution": "base"}]  # base: 0.25, on a only
    (entry,) = comparison(rows, None, {"d": "base"}, hardware={"NVIDIA H200": TABLE})
    assert (entry["solution"], entry["against"], entry["pairs"]) == ("s", "base", 1)
    assert entry["sol_fraction"] == 0.5  # on the paired workload a, not b
    assert entry["against_sol_fraction"] == 0.25
    (unknown,) = comparison(rows, None, {"d": "base"})  # no hardware: none
    assert unknown["sol_fraction"] is None and unknown["against_sol_fraction"] is None
    # the rates achieved on the paired workload, with or without a table: 2 and 1 TB/s
    assert (unknown["tb_s"], unknown["against_tb_s"]) == pytest.approx((2.0, 1.0))
