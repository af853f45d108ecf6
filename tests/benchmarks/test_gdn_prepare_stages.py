"""benchmarks/gdn_prepare_stages.py instruments the shipped chunked GDN prefill by string
anchors: each stage's early return is in the kernel it loads, and an anchor the solution
lost stops the benchmark with its name rather than timing the wrong kernel."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gdn_prepare_stages as stages  # noqa: E402


def test_every_stage_returns_early_in_the_loaded_kernel(tmp_path):
    module = stages.load_module(tmp_path)
    source = (tmp_path / "gdn_prepare_stages_kernel.py").read_text()
    assert [n for n in range(10) if f"    if STOP == {n}:\n" in source] == [0, 1, 2, 3, 4]
    assert "STOP: tl.constexpr = 9" in source
    assert module._chunk_prepare.arg_names[-1] == "STOP"


def test_a_lost_anchor_is_named(tmp_path, monkeypatch):
    solution = json.loads(stages.SOLUTION.read_text())
    content = solution["sources"][0]["content"]
    solution["sources"][0]["content"] = content.replace("kk = tl.dot(key, tl.trans(key))", "kk = 0")
    changed = tmp_path / "solution.json"
    changed.write_text(json.dumps(solution))
    monkeypatch.setattr(stages, "SOLUTION", changed)
    with pytest.raises(SystemExit, match=r"anchor not found once: 'kk = tl.dot\(key"):
        stages.instrumented_source()
