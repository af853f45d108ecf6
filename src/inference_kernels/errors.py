"""The one exception type for problems a user can cause, and the problem record.

Every problem names the file and the field it is about, so that a message such as
``definitions/gemm/x.json: inputs.A.dtype: unknown dtype 'bf16'`` tells the reader
exactly where to look. The CLI prints these without a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Problem:
    file: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.field}" if self.field else self.file
        return f"{where}: {self.message}"


class DatasetError(Exception):
    """A bad file, field or value in user-supplied data."""

    def __init__(self, file: str | Path, field: str, message: str):
        self.problem = Problem(str(file), field, message)
        super().__init__(str(self.problem))


def close_names(name: str, known: Iterable[str]) -> list[str]:
    """Up to three of ``known`` that ``name`` may have been meant as ("did you mean")."""
    return difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
