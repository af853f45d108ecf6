"""benchmarks/peaks.py --from-report writes a device's hardware table from a report it
printed before (on the device, where --write can fail after the measuring), keeping when
and how the figures were measured; it refuses a report that lacks a figure."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import peaks  # noqa: E402

from inference_kernels.schema import Hardware  # noqa: E402

REPORT = {
    "device": "NVIDIA H100 80GB HBM3",
    "torch": "2.11.0+cu130",
    "cuda": "13.0",
    "method": "best of 7 CUDA-graph replays, events",
    "sizes": {"matmul_n": 8192, "copy_bytes": 4294967296},
    "measured_at": "2026-12-05T12:36:25+00:00",
    "bf16_tflops": 791.732,
    "fp8_tflops": 1402.33,
    "fp32_tflops": 51.817,
    "memory_tb_s": 3.111,
    "empty_kernel_us": 1.18,
    "sm_mhz": 1980,
}


def _main(monkeypatch, *argv):
    monkeypatch.setattr(sys, "argv", ["peaks.py", *argv])
    peaks.main()


def test_a_printed_report_becomes_the_devices_table(tmp_path, monkeypatch):
    report = tmp_path / "peaks.json"
    report.write_text(json.dumps(REPORT))
    table = tmp_path / "hardware" / "h100.json"
    _main(monkeypatch, "--from-report", str(report), "--write", str(table))
    written = Hardware.model_validate_json(table.read_text())
    assert written.device == "NVIDIA H100 80GB HBM3"
    assert written.tflops == {"bf16": 791.732, "fp8": 1402.33, "fp8xfp4": 1402.33, "fp32": 51.817}
    assert (written.memory_tb_s, written.empty_kernel_us) == (3.111, 1.18)
    # when it was measured, not when the table was written
    assert written.provenance["measured_at"] == "2026-12-05T12:36:25+00:00"
    assert written.provenance["sm_mhz"] == 1980


def test_a_report_without_a_figure_or_a_table_to_write_is_refused(tmp_path, monkeypatch):
    report = tmp_path / "peaks.json"
    report.write_text(json.dumps({**REPORT, "fp8_tflops": None}))
    table = tmp_path / "h100.json"
    with pytest.raises(SystemExit, match="not measured here: fp8_tflops"):
        _main(monkeypatch, "--from-report", str(report), "--write", str(table))
    assert not table.exists()
    with pytest.raises(SystemExit, match="--write"):
        _main(monkeypatch, "--from-report", str(report))
