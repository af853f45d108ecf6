import json

import pytest
from typer.testing import CliRunner

from inference_kernels.cli import app
from inference_kernels.report.compare import comparison
from inference_kernels.report.rows import standing
from inference_kernels.report.summary import performance_markdown, preferred, summary
from inference_kernels.report.tables import passed_label, solution_table
from inference_kernels.signing import sign_row


def spread(median):
    """Seven samples within 1% of ``median``, as a quiet H200 gives."""
    return [median * f for f in (0.99, 0.995, 0.998, 1.0, 1.002, 1.005, 1.01)]


def phase(median, method):
    samples = spread(median)
    return {
        "method": method,
        "median_us": median,
        "min_us": min(samples),
        "max_us": max(samples),
        "stdev_us": 0.01 * median,
        "calls_per_sample": 100,
        "samples_us": samples,
    }


def case(solution, uuid, status="passed", graph=None, eager=None, definition="d", cpu=False):
    timing = {}
    if graph is not None:
        timing["graph"] = phase(graph, "cuda-graph")
    if eager is not None:
        timing["eager"] = phase(eager, "cpu-wall-clock" if cpu else "cuda-events")
    return {
        "type": "case",
        "definition": definition,
        "solution": solution,
        "uuid": uuid,
        "status": status,
        "timing": timing,
        "inputs": "stand-in",
    }


ROWS = [
    {"type": "environment", "started_at": "t", "devices": [], "versions": {}},
    case("base", "w1", graph=10.0, eager=12.0),
    case("base", "w2", graph=40.0),
    case("base", "w3", graph=5.0),
    case("fast", "w1", graph=5.0),
    case("fast", "w2", graph=10.0),
    case("fast", "w3", status="mismatch"),
    case("eager_only", "w1", eager=20.0),
]


def test_graph_time_is_preferred_and_speedups_are_paired_geomeans():
    table = {e["solution"]: e for e in solution_table(ROWS, {"d": "base"})}
    assert table["base"]["time_us"] == pytest.approx((10 * 40 * 5) ** (1 / 3))
    assert table["fast"]["passed"] == 2 and table["fast"]["failed"] == {"mismatch": 1}
    assert table["fast"]["speedup"] == pytest.approx((2 * 4) ** 0.5)  # w1: 10/5, w2: 40/10
    assert table["eager_only"]["method"] == "cuda-events"
    assert table["eager_only"]["speedup"] == pytest.approx(10 / 20)


def test_compare_within_one_file_against_the_baseline():
    result = {e["solution"]: e for e in comparison(ROWS, None, {"d": "base"})}
    assert set(result) == {"fast", "eager_only"}
    fast = result["fast"]
    assert (fast["pairs"], fast["faster"], fast["min"], fast["max"]) == (2, 2, 2.0, 4.0)
    assert fast["inputs"] == "stand-in"


def test_compare_names_the_inputs_of_the_paired_workloads_only():
    rows = [case("base", "w1", graph=2.0), case("fast", "w1", graph=1.0)]
    rows += [{**case("base", "w2", graph=2.0), "inputs": "captured"}]  # not paired
    (entry,) = comparison(rows, None, {"d": "base"})
    assert (entry["pairs"], entry["inputs"]) == (1, "stand-in")
    rows.append({**case("fast", "w2", graph=1.0), "inputs": "captured"})
    (entry,) = comparison(rows, None, {"d": "base"})
    assert (entry["pairs"], entry["inputs"]) == (2, "captured, stand-in")


def test_compare_two_runs_of_the_same_solution():
    old = [case("fast", "w1", graph=8.0), case("fast", "w2", graph=10.0)]
    (entry,) = comparison(
        [case("fast", "w1", graph=4.0), case("fast", "w2", graph=20.0)], old, {}, solution="fast"
    )
    assert entry["against"] == "fast" and entry["pairs"] == 2
    assert entry["speedup"] == pytest.approx(1.0) and entry["faster"] == 1


def test_summary_and_markdown_count_statuses_and_inputs():
    report = summary(ROWS, {"d": "base"})
    assert report["status"] == "failed" and report["statuses"] == {"passed": 6, "mismatch": 1}
    assert report["inputs"] == {"stand-in": 7} and report["workloads"] == 3
    text = performance_markdown(report)
    fast = "| d | fast | STAND-IN | 2/3 | 7.07 | cuda-graph, sustained | 2.83x (2.81-2.85) |"
    assert fast in text
    assert "| d | base | STAND-IN | 3/3 | 12.60 | cuda-graph, sustained | 1.00x n.s. |" in text
    assert "stand-in 7" in text
    json.dumps(report)  # serializable


def test_preferred_takes_the_fastest_solution_that_passed_everything_it_ran():
    rows = ROWS + [case("complete", u, graph=20.0) for u in ("w1", "w2", "w3")]
    (choice,) = preferred(rows, {"d": "base"})["definitions"]
    assert choice["solution"] == "base"  # 'fast' failed a case; 'complete' is slower
    rows.append(case("complete", "w4", graph=1.0))
    (choice,) = preferred(rows, {"d": "base"})["definitions"]
    assert choice["solution"] == "complete"  # it covers the most workloads


def signed(rows):
    return "".join(json.dumps(sign_row(row)) + "\n" for row in rows)


def test_results_files_are_validated_row_by_row(tmp_path):
    from inference_kernels.errors import DatasetError
    from inference_kernels.report.rows import read_rows

    path = tmp_path / "results.jsonl"
    path.write_text(signed(ROWS))
    rows, dropped = read_rows(path)
    assert [{k: v for k, v in r.items() if k != "mac"} for r in rows] == ROWS and dropped == 0
    damaged = [*ROWS[:2], {**ROWS[2], "status": None}]
    path.write_text(signed(damaged))
    with pytest.raises(DatasetError) as caught:
        read_rows(path)
    problem = caught.value.problem
    assert problem.field == "line 3.status"
    assert problem.message.startswith("Input should be 'passed', 'load_failed'")
    invented = [*ROWS[:2], {**ROWS[2], "status": "passed_with_honours"}]  # a closed vocabulary
    path.write_text(signed(invented))
    with pytest.raises(DatasetError, match="line 3.status"):
        read_rows(path)
    untyped = [*ROWS[:2], {**ROWS[2], "timing": {"graph": {"median_us": "fast"}}}]
    path.write_text(signed(untyped))
    with pytest.raises(DatasetError, match=r"line 3.timing.graph"):
        read_rows(path)
    path.write_text(json.dumps({"type": "summary"}) + "\n")
    with pytest.raises(DatasetError, match="neither a case nor an environment row"):
        read_rows(path)


def test_rows_that_fail_their_mac_are_dropped_and_counted(tmp_path):
    from inference_kernels.report.rows import read_rows

    path = tmp_path / "results.jsonl"
    forged = json.loads(signed([case("fast", "w3", status="mismatch")]))
    forged["status"] = "passed"  # edited after signing
    unsigned = case("fast", "w4", graph=1.0)
    path.write_text(signed(ROWS) + json.dumps(forged) + "\n" + json.dumps(unsigned) + "\n")
    rows, dropped = read_rows(path)
    assert dropped == 2 and len(rows) == len(ROWS)
    result = CliRunner().invoke(app, ["summary", str(path), "-o", str(tmp_path / "s")])
    assert result.exit_code == 0
    assert "dropped 2 row(s) that fail authentication" in result.output
    assert json.loads((tmp_path / "s/summary.json").read_text())["cases"] == len(ROWS) - 1


def test_a_gzipped_results_file_reads_as_the_plain_one_and_a_torn_one_is_named(tmp_path):
    """The measurements kept in docs/ are gzip-compressed (the tree sent to a GPU machine
    must stay under its size limit): every command reads them as they are."""
    import gzip

    from inference_kernels.errors import DatasetError
    from inference_kernels.report.rows import read_rows

    plain, packed = tmp_path / "results.jsonl", tmp_path / "results.jsonl.gz"
    forged = json.loads(signed([case("fast", "w3", status="mismatch")]))
    forged["status"] = "passed"  # edited after signing: dropped from both alike
    text = signed(ROWS) + json.dumps(forged) + "\n"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    assert read_rows(packed) == read_rows(plain)
    assert read_rows(packed)[1] == 1 and len(read_rows(packed)[0]) == len(ROWS)
    result = CliRunner().invoke(app, ["summary", str(packed), "-o", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "s/summary.json").read_text())["cases"] == len(ROWS) - 1
    packed.write_bytes(gzip.compress(text.encode())[:-20])  # cut short
    with pytest.raises(DatasetError, match="not a whole gzip file") as caught:
        read_rows(packed)
    assert caught.value.problem.file == str(packed)
    plain.rename(packed)  # a plain file under a .gz name
    with pytest.raises(DatasetError, match="not a whole gzip file"):
        read_rows(packed)


def test_compare_and_preferred_commands_label_stand_in_inputs(tmp_path):
    results = tmp_path / "results.jsonl"
    results.write_text(signed(ROWS))
    runner = CliRunner()
    compared = runner.invoke(
        app, ["compare", str(results), "--against", "base"], terminal_width=200
    )
    assert compared.exit_code == 0, compared.output
    # the rows of 'fast' and 'eager_only', and the note under the table
    assert compared.output.count("STAND-IN") == 3, compared.output
    assert "STAND-IN inputs are generated, not captured." in compared.output
    chosen = runner.invoke(app, ["preferred", str(results), "-o", str(tmp_path / "preferred.json")])
    assert chosen.exit_code == 0, chosen.output
    assert "STAND-IN inputs" in chosen.output
    assert "the rows name no one GPU model" in chosen.output  # (ROWS name no GPU)


def test_a_median_interval_comes_from_order_statistics():
    from inference_kernels.stats import median_interval

    low, high, coverage = median_interval(list(range(20, 0, -1)))
    assert (low, high, round(coverage, 4)) == (6, 15, 0.9586)  # ranks 6 and 15 of 20
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0, 0.75)  # too few for 95%
    assert median_interval([]) is None


def test_the_same_code_twice_is_no_significant_difference_and_a_real_gain_is():
    import random

    noisy = random.Random(7)

    def run(scale):
        rows = []
        for w in range(5):
            samples = [scale * (10 + w) * noisy.uniform(0.9, 1.1) for _ in range(7)]
            row = case("s", f"w{w}", graph=sorted(samples)[3])
            row["timing"]["graph"]["samples_us"] = samples
            rows.append(row)
        return rows

    first, second, faster = run(1.0), run(1.0), run(0.5)
    (same,) = comparison(first, second, {}, solution="s")
    assert same["verdict"] == "no significant difference"
    assert same["interval"][0] < 1.0 < same["interval"][1]
    (gain,) = comparison(faster, first, {}, solution="s")
    assert gain["verdict"] == "faster" and 1.0 < gain["interval"][0] < 2.0 < gain["interval"][1]


def test_preferred_picks_no_winner_from_noise_or_cpu_times():
    rows = [case("base", "w1", graph=10.0), case("twin", "w1", graph=10.05)]
    picked = preferred(rows, {"d": "base"})
    assert picked["definitions"] == []
    (undecided,) = picked["undecided"]
    assert undecided["reason"] == "base and twin: no significant difference"
    rows = [case("base", "w1", eager=10.0, cpu=True), case("fast", "w1", eager=2.0, cpu=True)]
    picked = preferred(rows, {"d": "base"})
    assert picked["definitions"] == []
    assert picked["undecided"][0]["reason"] == "CPU wall-clock times are indicative only"
    (entry,) = solution_table(rows, {"d": "base"})[1:]
    # 5x on the CPU: indicative, and never significant (stats.RUN_TO_RUN)
    assert entry["indicative"] and entry["significance"] == "no significant difference"


def in_regime(row, regime):
    return {**row, "timing": {**row["timing"], "regime": regime}}


def test_times_of_different_regimes_are_not_compared_and_pick_no_preferred():
    base = [in_regime(case("base", u, graph=10.0), "sustained") for u in ("w1", "w2")]
    fast = [in_regime(case("fast", u, graph=5.0), "burst") for u in ("w1", "w2")]
    (entry,) = comparison(base + fast, None, {"d": "base"})
    assert entry["regime"] == "burst, sustained"
    assert entry["verdict"] == "not comparable: timed in different regimes"
    table = {e["solution"]: e for e in solution_table(base + fast, {"d": "base"})}
    assert table["fast"]["regime"] == "burst" and table["base"]["regime"] == "sustained"
    picked = preferred(base + fast, {"d": "base"})
    assert picked["definitions"] == []
    assert "different regimes" in picked["undecided"][0]["reason"]
    same = [in_regime(row, "burst") for row in base] + fast
    assert comparison(same, None, {"d": "base"})[0]["verdict"] == "faster"


def on_gpu(uuid):
    device = {"device": "cuda:0", "nvidia_smi": {"uuid": uuid}}
    return {"type": "environment", "started_at": "t", "devices": [device], "versions": {}}


def test_times_of_different_gpus_are_not_compared_and_pick_no_preferred(tmp_path):
    # One results file per GPU, as two sessions on two lent H200s make them: every case
    # row takes its GPU from the environment row before it that names its device.
    base = [on_gpu("GPU-a")] + [{**case("base", u, graph=10.0), "device": "cuda:0"} for u in "xy"]
    fast = [on_gpu("GPU-b")] + [{**case("fast", u, graph=5.0), "device": "cuda:0"} for u in "xy"]
    (entry,) = comparison(base + fast, None, {"d": "base"})
    assert entry["verdict"] == "not comparable: timed on different GPUs"
    assert entry["speedup"] == pytest.approx(2.0)  # still shown, with the reason
    picked = preferred(base + fast, {"d": "base"})
    assert picked["definitions"] == [] and "different GPUs" in picked["undecided"][0]["reason"]
    # the same two runs on one GPU are compared; a row without a GPU (CPU) pairs with any
    same = base + [on_gpu("GPU-a")] + fast[1:]
    assert comparison(same, None, {"d": "base"})[0]["verdict"] == "faster"
    unknown = base + [case("fast", u, graph=5.0) for u in "xy"]
    assert comparison(unknown, None, {"d": "base"})[0]["verdict"] == "faster"
    # the CLI says so in its table
    for name, rows in (("new", fast), ("old", base)):
        (tmp_path / f"{name}.jsonl").write_text(signed(rows))
    files = [str(tmp_path / "new.jsonl"), str(tmp_path / "old.jsonl")]
    shown = CliRunner().invoke(app, ["compare", *files, "--solution", "fast", "--against", "base"])
    assert "GPUs differ" in shown.output, shown.output


def test_a_difference_within_the_run_to_run_floor_is_not_significant():
    def verdict_of(new, cpu):
        rows = [case("base", u, eager=10.0, cpu=cpu) for u in ("w1", "w2")]
        rows += [case("fast", u, eager=new, cpu=cpu) for u in ("w1", "w2")]
        (entry,) = comparison(rows, None, {"d": "base"})
        return entry["verdict"], entry["interval"]

    verdict, interval = verdict_of(10.0 / 1.015, cpu=False)  # 1.5% faster, a tight interval
    assert interval[0] > 1.0 and verdict == "no significant difference"  # under the GPU's 2%
    assert verdict_of(10.0 / 1.5, cpu=False)[0] == "faster"
    assert verdict_of(10.0 * 1.5, cpu=False)[0] == "slower"
    assert verdict_of(10.0 / 1.5, cpu=True)[0] == "no significant difference"
    assert verdict_of(10.0 / 50.0, cpu=True)[0] == "no significant difference"  # CPU: never


def test_times_of_the_cpu_stand_in_graph_are_indicative():
    from inference_kernels.report.rows import indicative

    assert indicative("cpu-graph-stand-in") and indicative("cpu-wall-clock")
    assert not indicative("cuda-graph") and not indicative("cuda-events, cold L2")


def test_no_solution_gains_from_a_graph_the_other_lost():
    # the baseline's graph could not be captured on w2 (the judge out of memory, or a
    # candidate holding device memory while it ran): its eager time there is no pair
    base = [case("base", "w1", graph=10.0), case("base", "w2", eager=80.0)]
    base += [case("base", "w3", graph=10.0)]
    fast = [case("fast", u, graph=g) for u, g in (("w1", 5.0), ("w2", 10.0), ("w3", 5.0))]
    (entry,) = comparison(base + fast, None, {"d": "base"})
    assert (entry["pairs"], entry["lesser"]) == (2, 1)
    assert entry["speedup"] == pytest.approx(2.0)  # not (2 * 8 * 2) ** (1 / 3)
    assert entry["verdict"] == "faster"  # on the pairs that remain
    table = {e["solution"]: e for e in solution_table(base + fast, {"d": "base"})}
    assert table["fast"]["speedup"] == pytest.approx(2.0)
    # a solution whose own graph was lost is held to the other's graph: its own loss
    slow = [case("slow", "w1", graph=20.0), case("slow", "w2", eager=40.0)]
    (entry,) = comparison(base + slow, None, {"d": "base"})
    assert (entry["pairs"], entry["lesser"]) == (2, 0)  # w2: eager against eager
    (entry,) = comparison([case("base", "w2", graph=20.0)] + slow, None, {"d": "base"})
    assert entry["speedup"] == pytest.approx(0.5) and entry["verdict"] != "faster"
    # a rival never captured (the H200's torch.compile of the mixed MLA decode) leaves no
    # pair: no choice, and the file says why rather than "rows without samples"
    never = [case("never", u, eager=400.0) for u in ("w1", "w2", "w3")]
    chosen = preferred(fast + never, {"d": "never"})
    assert chosen["definitions"] == []
    (why,) = chosen["undecided"]
    assert (
        "never has no time of fast's method on 3 (its graph could not be captured)" in why["reason"]
    )


def test_preferred_holds_the_fastest_to_every_other_not_only_the_next():
    # "victim" lost its graph on half the workloads (its mean then counts eager times)
    # and ranks third, behind "other"; "saboteur" is faster than "other" but slower than
    # "victim" wherever those two were timed alike
    workloads = [f"w{i}" for i in range(6)]
    victim = [case("victim", u, graph=10.0) for u in workloads[:3]]
    victim += [case("victim", u, eager=30.0) for u in workloads[3:]]
    saboteur = [case("saboteur", u, graph=11.0) for u in workloads]
    other = [case("other", u, graph=12.0) for u in workloads]
    picked = preferred(victim + saboteur + other, {"d": "other"})
    assert picked["definitions"] == []
    assert "saboteur and victim" in picked["undecided"][0]["reason"]
    honest = [case("victim", u, graph=10.0) for u in workloads] + saboteur + other
    assert preferred(honest, {"d": "other"})["definitions"][0]["solution"] == "victim"


def test_a_preferred_file_names_its_gpu_its_run_and_its_ratio_table_and_loads_into_a_dataset(
    tmp_path,
):
    import shutil
    from pathlib import Path

    from inference_kernels.dataset.layout import load_dataset

    name = "dense_gemm_bf16_nt_bias_n384_k384"
    bundled = Path(__file__).resolve().parents[2] / "dataset"
    root = tmp_path / "dataset"
    for part in (f"definitions/gemm/{name}.json", f"solutions/gemm/torch_{name}.json"):
        (root / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(bundled / part, root / part)
    fast = json.loads((root / f"solutions/gemm/torch_{name}.json").read_text()) | {"name": "fast"}
    (root / "solutions/gemm/fast.json").write_text(json.dumps(fast))
    environment = on_gpu("GPU-a")
    environment["devices"][0]["nvidia_smi"]["name"] = "NVIDIA H200"
    environment |= {"suite": "dev", "regime": "sustained", "manifest": {"judge": "abc"}}
    rows = [environment] + [
        {**case(solution, u, graph=time, definition=name), "device": "cuda:0"}
        for solution, time in ((f"torch_{name}", 10.0), ("fast", 5.0))
        for u in "xyz"
    ]
    picked = preferred(rows, {name: f"torch_{name}"})
    assert picked["device"] == "NVIDIA H200"
    assert picked["source"] | {"started_at": None} == {
        "suite": ["dev"],
        "regime": ["sustained"],
        "started_at": None,
        "gpus": ["GPU-a"],
        "torch": [],
        "judge": ["abc"],
    }
    (choice,) = picked["definitions"]
    assert choice["solution"] == "fast"
    (versus,) = choice["versus"]  # the ratio table: against each other measured solution
    assert versus["solution"] == f"torch_{name}" and versus["verdict"] == "faster"
    assert versus["speedup"] == pytest.approx(2.0)
    (root / "preferred").mkdir()
    (root / "preferred/h200.json").write_text(json.dumps(picked))
    # another GPU's file that names a solution of no such definition: the field is named
    wrong = picked | {"device": "NVIDIA H100"}
    wrong["definitions"] = [choice | {"solution": "nope"}]
    (root / "preferred/h100.json").write_text(json.dumps(wrong))
    loaded = load_dataset(root)
    assert loaded.preferred["NVIDIA H200"].definitions[0].solution == "fast"
    assert "NVIDIA H100" not in loaded.preferred
    found = [(p.file, p.field) for p in loaded.problems if p.file.startswith("preferred/")]
    assert found == [("preferred/h100.json", "definitions[0].solution")]
    shown = CliRunner().invoke(app, ["show", "-d", name, "--dataset", str(root), "--json"])
    assert shown.exit_code == 0, shown.output
    (described,) = json.loads(shown.output)
    assert described["preferred"]["NVIDIA H200"]["solution"] == "fast"
    assert described["solutions"] == ["fast", f"torch_{name}"]


def test_our_kernels_are_set_against_the_fastest_library_path_of_each_definition():
    from inference_kernels.report.compare import times_by_case
    from inference_kernels.report.libraries import against_libraries

    rows = [
        case(solution, u, graph=time)
        for solution, time in (
            ("torch_d", 40.0),  # the baseline: a library path
            ("compile_d", 20.0),  # the fastest library path
            ("triton_d", 10.0),  # ours, twice as fast as the best library
            ("cuda_d", 30.0),
        )
        for u in ("w1", "w2")
    ]
    rows += [case("fla_d", "w1", graph=1.0), case("fla_d", "w2", status="mismatch")]
    rows += [
        case(s, "w1", graph=t, definition="e") for s, t in (("torch_e", 5.0), ("triton_e", 6.0))
    ]
    # a candidate named like a library path, faster than all: not the dataset's, not counted
    rows += [case("compile_fake", u, graph=0.5) for u in ("w1", "w2")]
    kind = {name: "library" for name in ("torch_d", "compile_d", "fla_d", "torch_e")}
    kind |= {name: "ours" for name in ("triton_d", "cuda_d", "triton_e")}
    table = solution_table(rows, {"d": "torch_d", "e": "torch_e"})
    for entry in table:  # fractions of the speed of light, as a hardware table would give
        entry["sol_fraction"], entry["bound"] = (
            {"triton_d": 0.8, "torch_e": 0.2}.get(entry["solution"], 0.1),
            "memory",
        )
    section = against_libraries(table, times_by_case(rows), kind)
    d, e = section["definitions"]
    # fla_d failed a case: never the library's best, however fast its other case
    assert (d["library"], d["ours"], d["fastest"]) == ("compile_d", "triton_d", "triton_d")
    assert d["ours_over_library"]["speedup"] == pytest.approx(2.0)
    assert d["ours_over_library"]["verdict"] == "faster"
    assert (e["library"], e["ours"], e["fastest"]) == ("torch_e", "triton_e", "torch_e")
    assert e["ours_over_library"]["speedup"] == pytest.approx(5 / 6)
    assert section["sol_geomean"] == pytest.approx((0.8 * 0.2) ** 0.5)
    assert section["below_floor"] == ["e"] and section["without_sol"] == []
    shown = performance_markdown(summary(rows, {"d": "torch_d", "e": "torch_e"}, None, kind))
    assert "## Our kernels against the library paths" in shown
    assert "| d | STAND-IN | compile_d | 20.00 | triton_d | 10.00 | 2.00x" in shown
    assert "| compile_fake" not in shown.split("## Our kernels")[1]
    # no fraction (no hardware table): not counted as under the floor, listed apart
    unknown = against_libraries(solution_table(rows, {"d": "torch_d"}), times_by_case(rows), kind)
    assert unknown["below_floor"] == [] and unknown["without_sol"] == ["d", "e"]


def test_a_solution_judged_in_two_runs_does_not_outrank_a_faster_one_on_its_row_count():
    """The baseline judged beside a library path in one run and beside torch.compile in
    another has two rows a workload; ranking by rows made it the definition's fastest
    library path over fla-core, eight times faster (H200 table, twenty-eighth session)."""
    from inference_kernels.report.compare import times_by_case
    from inference_kernels.report.libraries import against_libraries

    rows = [case("torch_d", u, graph=60.0) for u in ("w1", "w2")] * 2
    rows += [
        case(s, u, graph=t) for s, t in (("fla_d", 7.0), ("triton_d", 7.5)) for u in ("w1", "w2")
    ]
    kind = {"torch_d": "library", "fla_d": "library", "triton_d": "ours"}
    table = solution_table(rows, {"d": "torch_d"})
    assert [(e["cases"], e["workloads"]) for e in table] == [(4, 2), (2, 2), (2, 2)]
    (d,) = against_libraries(table, times_by_case(rows), kind)["definitions"]
    assert (d["library"], d["ours"], d["fastest"]) == ("fla_d", "triton_d", "fla_d")
    assert preferred(rows, {"d": "torch_d"})["definitions"][0]["solution"] == "fla_d"
    # a solution that ran fewer workloads still cannot win on a subset
    fewer = rows + [case("cuda_d", "w1", graph=1.0)]
    (d,) = against_libraries(
        solution_table(fewer, {}), times_by_case(fewer), kind | {"cuda_d": "ours"}
    )["definitions"]
    assert d["fastest"] == "fla_d"


def case_phase(row):
    """The method whose time stands for a case (rows.standing), or None."""
    return (standing(row) or {}).get("phase")


def timed_outside(row):
    """Whether the time that stands for a case is the referee's own."""
    return bool((standing(row) or {}).get("from_outside"))


def resolved_to(row, method, resolution_us, flagged=False, seen_us=None):
    """The row's ``method`` with the outside check's resolution (and the judge's flag), the
    referee having seen ``seen_us`` a call (1.1 times the reported time unless given)."""
    timing = row["timing"][method]
    seen = seen_us or timing["median_us"] * 1.1
    timing["outside"] = {
        "median_us": seen,
        "samples_us": [s * seen / timing["median_us"] for s in timing["samples_us"]],
        "resolution_us": resolution_us,
        "tolerance": 0.15,
    }
    if flagged:
        timing["unresolved"] = True
    return row


def test_a_time_the_outside_check_cannot_resolve_is_never_ranked_on():
    """Ninth attacker's trial: where few sets fit, a worker could report any time the
    allowance covered. A method whose resolution is over its time does not stand for its
    case (the next method that is resolved does), in rows written before the judge flagged
    it too; with none resolved a GPU case is passed and untimed (work queued before the
    reply may run on after it, unseen: the referee's time is no upper bound there)."""
    rows = ROWS + [
        # w1: the graph's 1.0 us under a resolution of 50 (an older row: no flag); eager
        # resolved at 20 of 30
        resolved_to(
            resolved_to(case("cheat", "w1", graph=1.0, eager=30.0), "graph", 50.0), "eager", 20.0
        ),
        # w2: reported 0.5 where the referee saw 60 a call, flagged
        resolved_to(case("cheat", "w2", graph=0.5), "graph", 50.0, flagged=True, seen_us=60.0),
        resolved_to(case("cheat", "w3", graph=5.0), "graph", 5.0),  # at its time: counted
    ]
    assert [case_phase(row) for row in rows[-3:]] == ["eager", None, "graph"]
    assert not any(timed_outside(row) for row in rows[-3:])
    table = {e["solution"]: e for e in solution_table(rows, {"d": "base"})}
    cheat = table["cheat"]
    assert cheat["time_us"] == pytest.approx((30.0 * 5.0) ** 0.5)
    assert cheat["passed"] == 3 and (cheat["untimed"], cheat["timed_outside"]) == (1, 0)
    assert cheat["speedup"] == pytest.approx((10 / 30 * 5 / 5) ** 0.5)  # w1 and w3 only
    text = performance_markdown(summary(rows, {"d": "base"}))
    assert "| d | cheat | STAND-IN | 3/3 (1 untimed) |" in text and "Untimed (GPU)" in text
    assert "untimed" not in text.split("| d | base |")[1].split("\n")[0]
    assert "Timed outside" not in text
    # on the two workloads both timed, the cheat is no faster: no choice over base
    assert preferred(rows, {"d": "base"})["definitions"] == []


def test_on_the_cpu_the_referees_time_stands_for_an_unresolved_one():
    """Tenth attacker's trial: left untimed, a slow solution's workloads reported under
    the resolution on purpose were left out of its comparisons ("4/4 (3 untimed)", ranked
    at 278.9 us where its honest twin took 1,024.5). On the CPU the worker is halted as
    its reply arrives, so the referee's own time of the calls is an upper bound: it stands
    for such a case (the median of its samples)."""
    from inference_kernels.report.rows import case_time

    base = [case("base", u, eager=100.0, cpu=True) for u in ("w1", "w2")]
    hider = [
        case("hider", "w1", eager=90.0, cpu=True),
        resolved_to(case("hider", "w2", eager=5.0, cpu=True), "eager", 150.0, True, 300.0),
    ]
    hider[1]["timing"]["eager"]["outside"]["samples_us"] = [310.0, 300.0, 290.1234]
    rows = base + hider
    assert case_phase(hider[1]) == "eager" and timed_outside(hider[1])
    assert case_time(hider[1]) == (300.0, "cpu-wall-clock")
    entry = {e["solution"]: e for e in solution_table(rows, {"d": "base"})}["hider"]
    assert entry["time_us"] == pytest.approx((90.0 * 300.0) ** 0.5)
    assert entry["speedup"] == pytest.approx((100 / 90 * 100 / 300) ** 0.5)  # both paired
    assert passed_label(entry) == "2/2 (1 timed outside)"
    text = performance_markdown(summary(rows, {"d": "base"}))
    assert "2/2 (1 timed outside)" in text and "Timed outside (CPU)" in text
    # a row from before the outside check, its time flagged: passed, no time at all
    bare = case("none", "c", eager=0.5, cpu=True)
    bare["timing"]["eager"]["unresolved"] = True
    assert case_phase(bare) is None
    assert passed_label(solution_table([bare], {})[0]) == "1/1 (1 untimed)"
