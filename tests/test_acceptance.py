import math

import pytest
import torch

from inference_kernels.acceptance import compare
from inference_kernels.schema import Tolerance

BF16 = Tolerance(atol=0.005, rtol=0.016)


def test_identical_outputs_pass_with_zero_error():
    value = torch.randn(4, 5, generator=torch.Generator().manual_seed(0)).bfloat16()
    verdict = compare(value.clone(), value, BF16)
    assert verdict.passed
    assert verdict.max_absolute_error == 0.0
    assert verdict.mismatched_elements == 0 and verdict.elements == 20


def test_shape_dtype_and_type_mismatches_have_their_own_status():
    expected = torch.zeros(2, 3, dtype=torch.bfloat16)
    assert (
        compare(torch.zeros(3, 2, dtype=torch.bfloat16), expected, BF16).status == "shape_mismatch"
    )
    assert compare(torch.zeros(2, 3), expected, BF16).status == "dtype_mismatch"
    assert compare([[0.0] * 3] * 2, expected, BF16).status == "type_mismatch"


def test_default_rule_is_atol_plus_rtol_times_reference():
    expected = torch.tensor([1.0, 100.0])
    tolerance = Tolerance(atol=0.01, rtol=0.1)
    # bound: 0.01 + 0.1 * |r| -> 0.11 and 10.01
    assert compare(torch.tensor([1.10, 110.0]), expected, tolerance).passed
    verdict = compare(torch.tensor([1.12, 110.0]), expected, tolerance)
    assert verdict.status == "mismatch"
    assert verdict.mismatched_elements == 1
    assert verdict.max_absolute_error == pytest.approx(10.0)


def test_absolute_or_relative_accepts_either_bound():
    tolerance = Tolerance(atol=0.01, rtol=0.01, comparison="absolute_or_relative")
    expected = torch.tensor([0.0, 100.0, 1.0])
    # 0.009 absolute; 0.9 is 0.9% of 100; 0.02 on 1.0 is neither (2% and > 0.01)
    actual = torch.tensor([0.009, 100.9, 1.02])
    verdict = compare(actual, expected, tolerance)
    assert verdict.mismatched_elements == 1
    assert compare(actual[:2], expected[:2], tolerance).passed
    # the default rule would have accepted 1.02 (0.01 + 0.01 * 1 = 0.02) - the rules differ
    assert compare(actual, expected, Tolerance(atol=0.01, rtol=0.01)).passed


def test_integer_and_bool_outputs_are_exact():
    expected = torch.tensor([[1, 2, 3]], dtype=torch.int64)
    loose = Tolerance(atol=10.0, rtol=10.0)
    assert compare(expected.clone(), expected, loose).passed
    verdict = compare(torch.tensor([[1, 2, 4]]), expected, loose)
    assert verdict.status == "mismatch" and verdict.mismatched_elements == 1
    flags = torch.tensor([True, False])
    assert compare(torch.tensor([True, True]), flags, loose).status == "mismatch"


def test_any_nonfinite_output_fails_even_under_a_loose_ratio():
    tolerance = Tolerance(atol=1.0, rtol=1.0, required_matched_ratio=0.5)
    expected = torch.zeros(1000)
    actual = torch.zeros(1000)
    actual[7] = math.nan
    verdict = compare(actual, expected, tolerance)
    assert verdict.status == "nonfinite" and verdict.mismatched_elements == 1
    actual[7] = math.inf
    assert compare(actual, expected, tolerance).status == "nonfinite"


def test_nan_in_the_reference_is_not_a_wildcard():
    expected = torch.tensor([1.0, math.nan])
    verdict = compare(torch.tensor([1.0, math.nan]), expected, BF16)
    assert verdict.status == "reference_nonfinite"
    assert not verdict.passed


def test_matched_ratio_exactly_at_the_bound_passes_and_one_below_fails():
    tolerance = Tolerance(atol=0.0, rtol=0.0, required_matched_ratio=0.9999)
    expected = torch.zeros(10000)
    actual = torch.zeros(10000)
    actual[0] = 1.0  # 9999/10000 = exactly 0.9999
    verdict = compare(actual, expected, tolerance)
    assert verdict.passed and verdict.mismatched_elements == 1
    actual[1] = 1.0  # 9998/10000
    assert compare(actual, expected, tolerance).status == "mismatch"


def test_ratio_is_counted_in_integers_not_a_rounded_mean():
    # 0.1 has no exact binary form; a float ratio could land a hair below it.
    tolerance = Tolerance(atol=0.0, rtol=0.0, required_matched_ratio=0.1)
    expected = torch.zeros(30)
    actual = torch.ones(30)
    actual[:3] = 0.0  # 3/30 == 0.1 exactly
    assert compare(actual, expected, tolerance).passed


def test_empty_tensors_pass_and_report_no_error():
    empty = torch.zeros(0, 4, dtype=torch.bfloat16)
    verdict = compare(
        empty.clone(), empty, Tolerance(atol=0.0, rtol=0.0, required_matched_ratio=1.0)
    )
    assert verdict.passed and verdict.elements == 0 and verdict.max_absolute_error == 0.0
    ints = torch.zeros(0, dtype=torch.int32)
    assert compare(ints.clone(), ints, BF16).passed


def test_without_a_ratio_every_element_must_match():
    expected = torch.zeros(100000)
    actual = torch.zeros(100000)
    actual[-1] = 1.0
    assert compare(actual, expected, BF16).status == "mismatch"


def test_bf16_bound_at_its_edge():
    expected = torch.tensor([2.0], dtype=torch.bfloat16)
    # bound = 0.005 + 0.016 * 2 = 0.037; bf16 spacing near 2 is 0.015625
    assert compare(torch.tensor([2.03125], dtype=torch.bfloat16), expected, BF16).passed
    assert not compare(torch.tensor([2.046875], dtype=torch.bfloat16), expected, BF16).passed
