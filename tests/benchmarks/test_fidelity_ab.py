"""benchmarks/fidelity_ab.py puts an experiment's setting beside the default on one GPU:
``--tree .@NAME=VALUE`` runs that tree's judge with the variable set, and the report keeps
the two apart. Here with the GPU's turns made up."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fidelity_ab  # noqa: E402


def test_a_tree_with_variables_is_run_with_them_and_reported_apart(monkeypatch, capsys):
    calls = []

    def turn(path, runs=None, extra=None):
        calls.append((path, extra))
        us = 600.0 if extra else 520.0  # the variant's judge reads its own figure
        figures = {"statuses": ["passed"], "median_us": us}
        return {"gemm": {"graph": figures, "eager": figures}}

    monkeypatch.setattr(fidelity_ab, "turn", turn)
    gap = "INFERENCE_KERNELS_SETS_CAP_BYTES"
    argv = ["fidelity_ab.py", "--tree", ".", "--tree", f".@{gap}=30", "--turns", "2"]
    monkeypatch.setattr(sys, "argv", argv)
    fidelity_ab.main()
    here = Path(".").resolve()
    assert calls == [(here, {}), (here, {gap: "30"})] * 2
    report = json.loads(capsys.readouterr().out)
    plain, varied = str(here), f"{here}@{gap}=30"
    assert report["trees"] == [plain, varied]
    gemm = report["shapes"]["gemm"]
    assert gemm[plain]["graph"]["turns_us"] == [520.0, 520.0]
    assert gemm[varied]["graph"]["turns_us"] == [600.0, 600.0]
    assert gemm["b_over_a"]["graph"] == round(600 / 520, 4)


@pytest.mark.parametrize("spec", [".@NOVALUE", ".@=3"])
def test_a_variable_that_is_not_name_equals_value_is_refused(spec):
    with pytest.raises(SystemExit, match="is not NAME=VALUE"):
        fidelity_ab.variant(spec)


def test_the_same_tree_twice_is_refused(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["fidelity_ab.py", "--tree", ".", "--tree", "."])
    with pytest.raises(SystemExit, match="twice"):
        fidelity_ab.main()
