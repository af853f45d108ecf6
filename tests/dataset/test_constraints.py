import pytest
import torch

from inference_kernels.dataset import constraints


def test_axis_expressions_evaluate():
    assert constraints.evaluate("Nall == Np + Nq", {"Nall": 7, "Np": 3, "Nq": 4}) is True
    assert constraints.evaluate("T >= KT", {"T": 2, "KT": 3}) is False
    assert constraints.evaluate("ceil_div(N, 16) <= MP", {"N": 33, "MP": 3}) is True


def test_value_expressions_read_tensors():
    values = {"total_seq_len": 9, "cu_seqlens": torch.tensor([0, 4, 9])}
    assert constraints.evaluate("total_seq_len == cu_seqlens[-1].item()", values) is True
    assert constraints.evaluate("(cu_seqlens.diff() >= 0).all()", values) is True
    ids = torch.tensor([0, 3, 2])
    assert constraints.evaluate("(expert_id.diff() >= 0).all()", {"expert_id": ids}) is False
    table = {"block_ids": torch.tensor([[0, 1, -1]]), "context_lens": torch.tensor([8])}
    assert constraints.evaluate("(block_ids < (context_lens // 4)[:, None]).all()", table)


def test_missing_names_defer():
    assert (
        constraints.evaluate("total_seq_len == cu_seqlens[-1].item()", {"total_seq_len": 3}) is None
    )


@pytest.mark.parametrize(
    "expression",
    ["__import__('os').system('true')", "x.__class__", "open('f')", "[i for i in x]", "lambda: 1"],
)
def test_anything_outside_the_grammar_is_refused(expression):
    with pytest.raises(constraints.ConstraintSyntaxError):
        constraints.parse(expression)


def test_runtime_failures_are_reported_not_raised_raw():
    with pytest.raises(ValueError, match="cannot evaluate"):
        constraints.evaluate("x[5] > 0", {"x": torch.zeros(2)})
