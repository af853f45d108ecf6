"""benchmarks/solution_variants.py sweeps a kernel's module constants: each variant is
checked against the reference before it is timed. Here on the CPU, in Triton's
interpreter (in a process of its own: Triton reads TRITON_INTERPRET when it is imported),
so without times, on the QSA index kernel's smallest workload (a row of 32 blocks)."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import solution_variants  # noqa: E402

QSA = "triton_qsa_index_topk_decode_qwen38_h4_d128_topk512_c4"


def _sweep(*arguments: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, str(ROOT / "benchmarks/solution_variants.py"), QSA, *arguments]
    return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)


def test_a_variant_that_writes_half_its_output_fails():
    done = _sweep(
        "--set", "TOP_K=512,256", "--set", "BITS=8", "--suite", "first", "--device", "cpu"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    header, workload = (json.loads(line) for line in done.stdout.splitlines())
    assert header["type"] == "sweep" and header["workloads"] == 1 and header["device"] == "cpu"
    assert workload["type"] == "workload"
    found = {tuple(v["set"].items()): v["passed"] for v in workload["variants"]}
    # the row's 32 ids are kept either way; with TOP_K 256 the last 256 of the 512 slots
    # keep the poison (the lowest int32) where the reference has -1
    assert found == {
        (): True,
        (("TOP_K", 512), ("BITS", 8)): True,
        (("TOP_K", 256), ("BITS", 8)): False,
    }, workload
    assert workload["inputs"] == "stand-in"
    assert all(v.get("us") is None for v in workload["variants"])  # no time on the CPU
    # a failed variant says why, as the judge's verdict would: 256 of 512 slots differ
    failed = next(v for v in workload["variants"] if not v["passed"])
    assert failed["error"] == (
        "mismatch: 256/512 elements differ (exact) (0 ambiguous rows left out)"
    ), failed
    assert all("error" not in v for v in workload["variants"] if v["passed"])


def test_one_workload_by_its_uuid_and_an_unknown_one():
    first = _sweep("--suite", "first", "--device", "cpu")
    header, workload = (json.loads(line) for line in first.stdout.splitlines())
    again = _sweep("--uuid", workload["uuid"], "--suite", "first", "--device", "cpu")
    assert [json.loads(line)["uuid"] for line in again.stdout.splitlines()[1:]] == [
        workload["uuid"]
    ]
    done = _sweep("--uuid", "nope", "--suite", "first", "--device", "cpu")
    assert done.returncode != 0 and "no workload nope in the first suite" in done.stderr


def test_settings_and_an_unknown_constant():
    assert solution_variants.settings(["BITS=4,8", "X=a"]) == {"BITS": [4, 8], "X": ["a"]}
    assert solution_variants.settings(["PDL=False,True"]) == {"PDL": [False, True]}
    assert solution_variants.variants({}) == [{}]  # the solution as it is, once
    with pytest.raises(SystemExit, match="expected NAME=V1,V2"):
        solution_variants.settings(["BITS"])
    done = _sweep("--set", "NOPE=1", "--suite", "first", "--device", "cpu")
    assert done.returncode != 0 and "has no module constant NOPE" in done.stderr


def test_every_planned_sweep_names_a_solution_and_its_constants():
    # benchmarks/variants.txt is what STEPS=variants of scripts/gpu_judge.sh sweeps on the
    # GPU: a misspelt constant would cost a device call to find out
    from inference_kernels.dataset.layout import load_dataset

    dataset = load_dataset(ROOT / "dataset")
    lines = (ROOT / "benchmarks/variants.txt").read_text().splitlines()
    planned = [line.split() for line in lines if line.strip() and not line.startswith("#")]
    assert len(planned) >= 5
    for name, *options in planned:
        solution = dataset.solutions[name]
        _, constants = solution_variants.loaded(solution, dataset.definitions[solution.definition])
        assert options[::2] == ["--set"] * (len(options) // 2), name
        grid = solution_variants.settings(options[1::2])
        assert set(grid) <= set(constants), (name, set(grid) - set(constants))
        for constant, values in grid.items():  # the solution's own value is among them
            assert constants[constant] in values, (name, constant)


def test_a_summary_gives_each_variants_time_over_the_solution_as_it_was(tmp_path):
    def workload(base, fast, wide_passed, inputs="stand-in"):
        return {
            "type": "workload",
            "inputs": inputs,
            "variants": [
                {"set": {}, "passed": True, "us": base},
                {"set": {"N": 2}, "passed": True, "us": fast},
                {"set": {"N": 4}, "passed": wide_passed, "us": 1.0 if wide_passed else None}
                | ({} if wide_passed else {"error": "mismatch: 3/9 elements differ"}),
            ],
        }

    header = {"type": "sweep", "solution": "s", "device": "cuda", "gpu": "G"}
    header.update(grid={"N": [2, 4]}, workloads=3)
    lines = [header, workload(10.0, 5.0, True), workload(8.0, 8.0, False, "captured")]
    path = tmp_path / "sweep.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines * 2))  # two sweeps
    first, second = solution_variants.summarized(
        [json.loads(x) for x in path.read_text().splitlines()]
    )
    assert first == second and first["workloads"] == "2/3" and first["gpu"] == "G"
    assert first["inputs"] == "captured and stand-in"  # stand-ins never pass for captured
    fast, base, wide = first["variants"]  # the variant failed on a workload comes last
    assert fast["set"] == {"N": 2} and fast["passed"] == 2 and fast["timed"] == 2
    assert fast["over_as_it_was"] == pytest.approx(0.5**0.5)  # 0.5 and 1.0
    assert (fast["least"], fast["most"]) == (0.5, 1.0)
    assert base["over_as_it_was"] == 1.0
    assert wide["passed"] == 1 and wide["over_as_it_was"] == pytest.approx(0.1)
    assert wide["first_error"] == "mismatch: 3/9 elements differ" and "first_error" not in fast
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/solution_variants.py"), "--summarize", str(path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "N=2" in done.stdout
    assert "first failure: mismatch: 3/9 elements differ" in done.stdout
    assert "0.707 (0.50-1.00) over 2" in done.stdout
    assert "(G, 2/3 workloads, captured and STAND-IN inputs)" in done.stdout


def test_a_sweep_stopped_by_a_lost_context_goes_on_without_the_variant(tmp_path, monkeypatch):
    # The bias GEMM's torch baseline on its first two dev workloads, with a constant its run
    # reads: "crash" raises as an illegal address would and "loses the context" (the CPU
    # has none to lose: patched); a resumed run leaves the crashed variant out, does the
    # stopped workload again and the next, and a second resume finds nothing left to do
    from inference_kernels.dataset.layout import load_dataset

    dataset = load_dataset(ROOT / "dataset")
    name = "torch_dense_gemm_bf16_nt_bias_n384_k384"
    solution = dataset.solutions[name]
    run, _ = solution_variants.loaded(solution, dataset.definitions[solution.definition])
    constants = {"MODE": "plain"}
    crashes = []

    def variant_run(*arguments):
        if constants["MODE"] == "crash":
            crashes.append(True)
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return run(*arguments)

    monkeypatch.setattr(solution_variants, "loaded", lambda *_: (variant_run, constants))
    monkeypatch.setattr(solution_variants, "_context_broken", lambda _: bool(crashes))
    grid = {"MODE": ["plain", "crash", "other"]}
    path = tmp_path / "sweep.jsonl"

    def swept():
        lines = list(
            solution_variants.sweep(
                dataset,
                name,
                grid,
                suite="dev",
                device="cpu",
                limit=2,
                rep_ms=1,
                log=io.StringIO(),
                resume=path if path.exists() else None,
            )
        )
        with path.open("a") as handle:
            handle.writelines(json.dumps(line) + "\n" for line in lines)
        return lines

    header, stopped = swept()  # the first workload's crash stops it
    assert header["type"] == "sweep" and stopped["crashed"] == {"MODE": "crash"}
    assert [v["set"] for v in stopped["variants"]] == [{}, {"MODE": "plain"}, {"MODE": "crash"}]
    assert solution_variants.resumed(path, header) == (True, set(), [{"MODE": "crash"}])
    crashes.clear()
    again, second = swept()  # no header; the stopped workload again, then the next
    assert again["uuid"] == stopped["uuid"] and second["uuid"] != again["uuid"]
    for line in (again, second):
        assert "stopped" not in line and len(line["variants"]) == 3
        assert {"MODE": "crash"} not in [v["set"] for v in line["variants"]]
    assert swept() == [] and not crashes  # both workloads done
    (summary,) = solution_variants.summarized([json.loads(x) for x in path.open()])
    passed = {json.dumps(row["set"]): row["passed"] for row in summary["variants"]}
    assert summary["workloads"] == "2/2"
    assert passed == {
        "{}": 2,
        '{"MODE": "plain"}': 2,
        '{"MODE": "other"}': 2,
        '{"MODE": "crash"}': 0,
    }
    assert summary["variants"][-1]["set"] == {"MODE": "crash"}  # failed: last
    # a sweep of another grid, or of other workloads, is not this one's to go on from
    assert solution_variants.resumed(path, {**header, "grid": {"MODE": ["plain"]}})[0] is False
    assert solution_variants.resumed(path, {**header, "workloads": 3})[0] is False
