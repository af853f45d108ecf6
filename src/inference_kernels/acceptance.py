"""The task's acceptance policy for one output: the single function everything uses.

Every status but ``passed`` is a failure (``statuses.py``), those of cases that never reach
an output check among them: a solution whose sources do not compile (``compile_error``) or
that does not load (``load_failed``) fails each of its cases.

Order of checks, each with its own status:
  shape, dtype, device must match            -> shape_mismatch / dtype_mismatch / device_mismatch
  a nonfinite value in the reference         -> reference_nonfinite (the case cannot be judged)
  a nonfinite value in the output            -> nonfinite
  all zeros where the reference is not       -> trivial_output (even if a loose tolerance
                                                would accept zeros)
  integer and bool outputs must be equal     -> mismatch
  floating outputs, per element:
    default:               |a - r| <= atol + rtol * |r|
    absolute_or_relative:  |a - r| <= atol  or  |a - r| / (|r| + 1e-8) <= rtol
  the matched fraction (counted in integers) must reach required_matched_ratio
  (all elements when the task sets none)    -> mismatch
Errors are computed in float32 on the tensors' device, as the seed's policy does. A
mismatch of floating outputs explains itself: matched ratio against the required one, the
largest errors against the tolerance, and the element furthest beyond its bound, with its
index, expected and actual values (in the row and in its one-line message).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from fractions import Fraction

import torch

from . import statuses
from .schema import Tolerance
from .statuses import PASSED


@dataclass(frozen=True)
class OutputVerdict:
    status: statuses.Status
    message: str = ""
    elements: int = 0
    mismatched_elements: int = 0
    matched_ratio: float = 1.0
    max_absolute_error: float | None = None
    max_relative_error: float | None = None
    # for a mismatch of floating outputs: where the error is largest beyond its bound
    worst_index: list[int] | None = None
    expected_value: float | None = None
    actual_value: float | None = None
    ignored_rows: int | None = None  # ambiguous rows left out (the task's ambiguity)

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def to_dict(self) -> dict:
        details = ("worst_index", "expected_value", "actual_value", "ignored_rows")
        return {k: v for k, v in asdict(self).items() if v is not None or k not in details}


def _ratio_reaches(matched: int, total: int, required: float | None) -> bool:
    if required is None:
        return matched == total
    # Exact rational comparison: "exactly at the bound" passes, with no float rounding.
    return total == 0 or Fraction(matched, total) >= Fraction(str(required))


def compare(
    actual: object,
    expected: torch.Tensor,
    tolerance: Tolerance,
    ignore_rows: torch.Tensor | None = None,
) -> OutputVerdict:
    """One output against its reference. ``ignore_rows`` (a bool per row of the first
    dimension) leaves ambiguous rows out once shape, dtype and device are checked."""
    verdict = _compare(actual, expected, tolerance, ignore_rows)
    if ignore_rows is None or verdict.status in _BEFORE_ROWS:
        return verdict
    verdict = replace(verdict, ignored_rows=int(ignore_rows.sum()))
    if verdict.passed:
        return verdict
    if verdict.worst_index is not None:  # an index among the kept rows: the output's own
        kept = torch.nonzero(~ignore_rows).reshape(-1)
        index = [int(kept[verdict.worst_index[0]]), *verdict.worst_index[1:]]
        verdict = replace(verdict, worst_index=index)
        verdict = replace(verdict, message=explain(verdict, tolerance))
    left_out = f" ({verdict.ignored_rows} ambiguous rows left out)"
    return replace(verdict, message=verdict.message + left_out)


_BEFORE_ROWS = (
    statuses.TYPE_MISMATCH,
    statuses.SHAPE_MISMATCH,
    statuses.DTYPE_MISMATCH,
    statuses.DEVICE_MISMATCH,
)


def _compare(
    actual: object,
    expected: torch.Tensor,
    tolerance: Tolerance,
    ignore_rows: torch.Tensor | None,
) -> OutputVerdict:
    if not isinstance(actual, torch.Tensor):
        return OutputVerdict(
            statuses.TYPE_MISMATCH, f"expected a tensor, got {type(actual).__name__}"
        )
    if actual.shape != expected.shape:
        return OutputVerdict(
            statuses.SHAPE_MISMATCH, f"shape {list(actual.shape)}, expected {list(expected.shape)}"
        )
    if actual.dtype != expected.dtype:
        return OutputVerdict(statuses.DTYPE_MISMATCH, f"dtype {actual.dtype} != {expected.dtype}")
    if actual.device != expected.device:
        return OutputVerdict(
            statuses.DEVICE_MISMATCH, f"device {actual.device} != {expected.device}"
        )
    if ignore_rows is not None:
        actual, expected = actual[~ignore_rows], expected[~ignore_rows]
    total = expected.numel()
    if not (actual.is_floating_point() or actual.is_complex()):
        mismatched = int((actual != expected).sum()) if total else 0
        status = PASSED if mismatched == 0 else statuses.MISMATCH
        message = "" if mismatched == 0 else f"{mismatched}/{total} elements differ (exact)"
        return OutputVerdict(
            status, message, total, mismatched, (total - mismatched) / total if total else 1.0
        )
    reference = expected.float()
    if total and not bool(torch.isfinite(reference).all()):
        return OutputVerdict(
            statuses.REFERENCE_NONFINITE, "the reference output is not finite", total
        )
    value = actual.float()
    nonfinite = int((~torch.isfinite(value)).sum()) if total else 0
    if nonfinite:
        return OutputVerdict(
            statuses.NONFINITE,
            f"{nonfinite}/{total} elements are NaN or inf",
            total,
            nonfinite,
            0.0,
        )
    if total and not bool(value.any()) and bool(reference.any()):
        return OutputVerdict(
            statuses.TRIVIAL_OUTPUT, "all zeros; the reference is not", total, total, 0.0
        )
    error = (value - reference).abs()
    relative = error / (reference.abs() + 1e-8)
    if tolerance.comparison == "absolute_or_relative":
        close = (error <= tolerance.atol) | (relative <= tolerance.rtol)
    else:
        close = error <= tolerance.atol + tolerance.rtol * reference.abs()
    matched = int(close.sum())
    passed = _ratio_reaches(matched, total, tolerance.required_matched_ratio)
    verdict = OutputVerdict(
        PASSED if passed else statuses.MISMATCH,
        "",
        total,
        total - matched,
        matched / total if total else 1.0,
        float(error.max()) if total else 0.0,
        float(relative.max()) if total else 0.0,
    )
    if passed:
        return verdict
    # the element furthest beyond its bound
    if tolerance.comparison == "absolute_or_relative":
        bound = torch.clamp(tolerance.rtol * (reference.abs() + 1e-8), min=tolerance.atol)
    else:
        bound = tolerance.atol + tolerance.rtol * reference.abs()
    excess = torch.where(close, -math.inf, error - bound)
    flat = int(excess.reshape(-1).argmax())
    index = [int(i) for i in torch.unravel_index(torch.tensor(flat), expected.shape)]
    verdict = replace(
        verdict,
        worst_index=index,
        expected_value=float(reference.reshape(-1)[flat]),
        actual_value=float(value.reshape(-1)[flat]),
    )
    return replace(verdict, message=explain(verdict, tolerance))


def explain(verdict: OutputVerdict, tolerance: Tolerance) -> str:
    """A mismatch in one line: how much matched against what is required, the largest
    errors against the tolerance, and the worst element."""
    required = tolerance.required_matched_ratio or 1.0
    rule = "or" if tolerance.comparison == "absolute_or_relative" else "+"
    text = (
        f"matched {verdict.elements - verdict.mismatched_elements}/{verdict.elements} "
        f"elements ({verdict.matched_ratio:.2%}, required {required:.2%}); "
        f"max abs error {verdict.max_absolute_error:.3g}, max rel error "
        f"{verdict.max_relative_error:.3g} (atol {tolerance.atol:g} {rule} rtol "
        f"{tolerance.rtol:g})"
    )
    if verdict.worst_index is not None:
        text += (
            f"; worst at {verdict.worst_index}: expected {verdict.expected_value:.6g}, "
            f"got {verdict.actual_value:.6g}"
        )
    return text
