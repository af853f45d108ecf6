"""Reading results rows and the one time that stands for a case."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import DatasetError
from ..schema import CaseRow, EnvironmentRow

_MODELS = {"case": CaseRow, "environment": EnvironmentRow}

# The time that represents a case, best first: a CUDA graph replay (no launch overhead,
# prepared launch when the solution has one), then eager prepared launch, then eager.
TIME_PREFERENCE = ("graph", "prepared", "eager")


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a results file, each validated as a case or an environment row."""
    if not path.is_file():
        raise DatasetError(path, "", "no such results file")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise DatasetError(path, f"line {number}", "not a JSON row") from None
        model = _MODELS.get(row.get("type")) if isinstance(row, dict) else None
        if model is None:
            raise DatasetError(path, f"line {number}.type", "neither a case nor an environment row")
        try:
            model.model_validate(row)
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(part) for part in first["loc"])
            raise DatasetError(path, f"line {number}.{field}", first["msg"]) from None
        rows.append(row)
    return rows


def case_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row for row in rows if row.get("type") == "case"]


def case_time(row: dict[str, Any]) -> tuple[float, str] | None:
    """(microseconds per call, method) of a passed case, or None."""
    if row.get("status") != "passed":
        return None
    for method in TIME_PREFERENCE:
        timing = row.get("timing", {}).get(method, {})
        if "median_us" in timing:
            return timing["median_us"], timing.get("method", method)
    return None


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None
