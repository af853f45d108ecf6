"""The HTML report: its figures on hand-made rows, its escaping of what solutions control,
its command's errors, and (in headless Chromium) that the page renders without errors."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from inference_kernels.cli import app
from inference_kernels.report.html import combine, page
from inference_kernels.signing import sign_row

BUNDLED = Path(__file__).resolve().parents[2] / "dataset"
GEMM = "dense_gemm_bf16_nt_bias_n384_k384"  # in the bundled dataset: M is its only var axis
BASE = f"torch_{GEMM}"
CPU = "cpu_only_definition"  # not in the dataset: sizes come from the rows' axes
HOSTILE = "<script>alert(1)</script>"
# Would mark the DOM if the browser ran it: a solution name is an attribute-breaking image.
PWN = "<img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">"


def phase(median, method="cuda-graph"):
    samples = [median * f for f in (0.99, 0.995, 0.998, 1.0, 1.002, 1.005, 1.01)]
    return {
        "method": method,
        "median_us": median,
        "median_interval_us": [samples[1], samples[-2]],
        "min_us": min(samples),
        "max_us": max(samples),
        "stdev_us": 0.01 * median,
        "calls_per_sample": 100,
        "samples_us": samples,
    }


def case(solution, uuid, m, *, graph=None, eager=None, definition=GEMM, **extra):
    timing = {"regime": "sustained"} if graph or eager else {}
    if graph:
        timing["graph"] = phase(graph)
    if eager:
        timing["eager"] = phase(eager, "cpu-wall-clock" if definition == CPU else "cuda-events")
    row = {
        "type": "case",
        "definition": definition,
        "solution": solution,
        "uuid": uuid,
        "status": "passed",
        "axes": {"M": m},
        "inputs": "stand-in",
        "timing": timing,
    }
    return {**row, **extra}


ENVIRONMENT = {"type": "environment", "started_at": "2026-01-01T00:00:00", "devices": []}
ENVIRONMENT["versions"] = {"torch": "2.11"}
ROWS = [
    ENVIRONMENT,
    case(BASE, "w-small", 4, graph=10.0, eager=12.0),
    case(BASE, "w-large", 64, graph=40.0, inputs="captured"),
    case("fast", "w-small", 4, graph=5.0),
    case("fast", "w-large", 64, graph=10.0, inputs="captured"),
    case("fast", "w-third", 8, status="mismatch", error=f"C differs by 3.5 {HOSTILE}"),
    case(PWN, "w-small", 4, status="runtime_error", error=PWN),
    case("cpu_base", "c1", 2, eager=100.0, definition=CPU),
    case("cpu_fast", "c1", 2, eager=50.0, definition=CPU),
]
BASELINES = {GEMM: BASE, CPU: "cpu_base"}


def write(path, rows):
    path.write_text("".join(json.dumps(sign_row(row)) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def html():
    return page(combine([ROWS]), BASELINES, {}, ["hand-made.jsonl"])


def test_page_holds_definitions_workloads_and_paired_speedups(html):
    assert f"<h2>{GEMM}</h2>" in html and f"<h2>{CPU}</h2>" in html
    for uuid in ("w-small", "w-large", "w-third", "c1"):
        assert f'title="{uuid}"' in html
    # Per workload: 10/5 and 40/10; per solution: their geometric mean, sqrt(8).
    assert "2.00x" in html and "4.00x" in html and "2.83x" in html
    assert html.count("faster</span>") >= 3  # 1% spreads: far beyond the 2% floor
    assert '<span class="badge stand-in">STAND-IN</span>' in html
    assert '<span class="badge captured">captured</span>' in html
    # Graph medians with their 95% interval; sizes from the axes (no dataset given).
    assert "10.00 <span" in html and "product of axes" in html


def test_cpu_speedups_are_indicative_and_never_significant(html):
    section = html[html.index(f"<h2>{CPU}</h2>") :]
    assert "2.00x" in section and "no significant difference" in section
    assert "indicative: CPU wall clock" in section
    assert "CPU wall-clock times are indicative only" in html


def test_text_from_results_is_escaped(html):
    assert HOSTILE not in html and PWN not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "mismatch" in html and "C differs by 3.5" in html


def test_optional_columns_and_plots_follow_what_rows_hold(html):
    from inference_kernels.schema import Hardware

    assert "speed of light" not in html and "No roofline" in html
    rows = [
        case(BASE, "w1", 4, graph=10.0, device="cuda:0"),
        case("fast", "w1", 4, graph=5.0, device="cuda:0"),
    ]
    rows[1]["work"] = {"flops": 2_000_000_000, "bytes": 1_000_000, "math": "bf16"}
    counted = page(combine([rows]), BASELINES, {}, ["x"])
    assert 'id="plot-0-roofline"' in counted and "No roofline" not in counted
    assert "speed of light" not in counted  # counts, but no peaks of the device
    gpu = {"type": "environment", "devices": [{"device": "cuda:0", "nvidia_smi": {"name": "G"}}]}
    table = Hardware(
        device="G",
        tflops={"bf16": 1000.0},  # 2 GFLOP: 2 us
        memory_tb_s=4.0,  # 1 MB: 0.25 us
        empty_kernel_us=2.1,  # the longest: launch-bound, 2.1 of fast's 5 us
        provenance={"command": "a test"},
    )
    rich = page(combine([[gpu, *rows]]), BASELINES, {}, ["x"], {"G": table})
    assert "speed of light" in rich and "42% (launch)" in rich


def test_later_files_replace_earlier_rows_of_the_same_case():
    first = [case(BASE, "w1", 4, graph=10.0), case("fast", "w1", 4, status="mismatch")]
    second = [case("fast", "w1", 4, graph=2.0)]
    rows = combine([first, second])
    assert [row["status"] for row in rows] == ["passed", "passed"]
    assert "5.00x" in page(rows, BASELINES, {}, ["a", "b"])


def test_command_writes_the_page_with_sizes_from_the_dataset(tmp_path):
    results = write(tmp_path / "r.jsonl", ROWS)
    output = tmp_path / "report"
    result = CliRunner().invoke(
        app, ["report", str(results), "-o", str(output), "--dataset", str(BUNDLED), "--json"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["page"] == str(output / "index.html")
    assert (summary["cases"], summary["definitions"], summary["solutions"]) == (8, 2, 5)
    written = (output / "index.html").read_text()
    assert "input bytes" in written and "2.83x" in written  # baseline from the dataset's task


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such results file"),
        ("{not json\n", "line 1: not a JSON row"),
        ('{"type": "case", "definition": "d"}\n', "line 1.solution: Field required"),
        (b"\xff\xfe\n", "not UTF-8 text"),
    ],
)
def test_a_missing_or_malformed_file_fails_in_one_line_naming_it(tmp_path, content, message):
    good = write(tmp_path / "good.jsonl", ROWS)
    bad = tmp_path / "bad.jsonl"
    if isinstance(content, bytes):
        bad.write_bytes(content)
    elif content is not None:
        bad.write_text(content)
    result = CliRunner().invoke(app, ["report", str(good), str(bad), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert text.startswith(f"error: {bad}") and message in text, text
    assert "Traceback" not in result.output
    assert not (tmp_path / "o" / "index.html").exists()


def test_an_output_that_is_a_file_fails_before_any_reading(tmp_path):
    blocker = tmp_path / "report"
    blocker.write_text("")
    result = CliRunner().invoke(
        app, ["report", str(tmp_path / "missing.jsonl"), "-o", str(blocker)]
    )
    assert result.exit_code == 2 and "is a file, not a folder" in result.output


# Records every uncaught error and console.error on the page's root element, where
# --dump-dom shows it (headless Chromium does not log the console to stderr).
PROBE = """<script>(function () {
  var seen = [];
  function note(message) {
    seen.push(String(message));
    document.documentElement.setAttribute("data-errors", JSON.stringify(seen));
  }
  window.addEventListener("error", function (e) { note(e.message || e); });
  var original = console.error;
  console.error = function () {
    note(Array.prototype.join.call(arguments, " "));
    original.apply(console, arguments);
  };
})();</script>"""


def chromium(*args, cwd):
    binary = shutil.which("chromium")
    assert binary, "headless Chromium is needed: apt-get install -y chromium"
    flags = ["--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars"]
    flags += [f"--user-data-dir={cwd / 'profile'}", "--virtual-time-budget=10000"]
    done = subprocess.run(
        [binary, *flags, *args], cwd=cwd, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_page_renders_in_headless_chromium_without_errors(tmp_path):
    results = write(tmp_path / "r.jsonl", ROWS)
    output = tmp_path / "report"
    result = CliRunner().invoke(
        app, ["report", str(results), "-o", str(output), "--dataset", str(BUNDLED)]
    )
    assert result.exit_code == 0, result.output
    written = (output / "index.html").read_text()
    assert "cdn" not in written.lower().split("</script>", 1)[1]  # plotly.js is inline
    probed = output / "probed.html"
    probed.write_text(written.replace("<head>", "<head>" + PROBE, 1))
    dom = chromium("--dump-dom", probed.as_uri(), cwd=tmp_path)
    assert 'data-errors="' not in dom, re.search(r'data-errors="[^"]*"', dom)
    assert 'data-pwned="' not in dom
    plots = re.findall(r'<div id="(plot-[^"]+)" class="plotly-graph-div', written)
    assert len(plots) == 3  # GEMM: speedups and times; CPU: times (no roofline figures)
    rendered = re.findall(r'id="(plot-[^"]+)" class="plotly-graph-div js-plotly-plot', dom)
    assert sorted(rendered) == sorted(plots) and dom.count('class="main-svg"') >= 2 * len(plots)
    screenshot = tmp_path / "report.png"
    chromium(f"--screenshot={screenshot}", "--window-size=1400,2000", probed.as_uri(), cwd=tmp_path)
    assert screenshot.stat().st_size > 20_000
