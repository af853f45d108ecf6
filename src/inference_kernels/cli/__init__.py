"""The ``inference-kernels`` command: thin wrappers that parse arguments and call one function.

Commands live in modules by the data they work on; importing them registers them on ``app``.
"""

import sys

from . import capture_commands, dataset_commands, judge_commands  # noqa: F401  (registration)
from .common import app, default_dataset

__all__ = ["app", "default_dataset", "main"]


def main() -> None:  # pragma: no cover - console entry for python -m
    sys.exit(app())
