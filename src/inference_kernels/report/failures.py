"""Failures grouped by cause: one message per (solution, status, kind of error), however
many workloads it happened on (a syntax error is not worth ten lines)."""

from __future__ import annotations

import re
from typing import Any

from ..statuses import PASSED
from .rows import case_rows

_NUMBERS = re.compile(r"[-+]?\d[\d.,]*(?:e[-+]?\d+)?")


def cause(solution: str, status: str, error: str | None) -> tuple[str, str, str]:
    """What makes two failures the same: the solution, the status and the error with its
    numbers blanked (the same mismatch on two workloads differs only in its figures)."""
    return solution, status, _NUMBERS.sub("#", error or "")


def grouped(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each cause once, in the order first seen: the first message in full and the
    workloads it happened on."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in case_rows(rows):
        if row["status"] == PASSED:
            continue
        key = cause(row["solution"], row["status"], row.get("error"))
        entry = groups.setdefault(
            key,
            {
                "definition": row["definition"],
                "solution": row["solution"],
                "status": row["status"],
                "error": row.get("error") or "",
                "workloads": [],
            },
        )
        entry["workloads"].append(row.get("uuid"))
    return list(groups.values())
