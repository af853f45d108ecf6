"""The task's acceptance policy for one output: the single function everything uses.

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
Errors are computed in float32 on the tensors' device, as the seed's policy does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
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

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def to_dict(self) -> dict:
        return asdict(self)


def _ratio_reaches(matched: int, total: int, required: float | None) -> bool:
    if required is None:
        return matched == total
    # Exact rational comparison: "exactly at the bound" passes, with no float rounding.
    return total == 0 or Fraction(matched, total) >= Fraction(str(required))


def compare(actual: object, expected: torch.Tensor, tolerance: Tolerance) -> OutputVerdict:
    if not isinstance(actual, torch.Tensor):
        return OutputVerdict(
            statuses.TYPE_MISMATCH, f"expected a tensor, got {type(actual).__name__}"
        )
    if actual.shape != expected.shape:
        return OutputVerdict(
            statuses.SHAPE_MISMATCH, f"shape {list(actual.shape)} != {list(expected.shape)}"
        )
    if actual.dtype != expected.dtype:
        return OutputVerdict(statuses.DTYPE_MISMATCH, f"dtype {actual.dtype} != {expected.dtype}")
    if actual.device != expected.device:
        return OutputVerdict(
            statuses.DEVICE_MISMATCH, f"device {actual.device} != {expected.device}"
        )
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
        "" if passed else f"matched {matched}/{total} elements",
        total,
        total - matched,
        matched / total if total else 1.0,
        float(error.max()) if total else 0.0,
        float(relative.max()) if total else 0.0,
    )
    return verdict
