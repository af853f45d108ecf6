"""The ``inference-kernels`` command: thin wrappers that parse arguments and call one function.

Commands live in modules by the data they work on; importing them registers them on ``app``.
"""

import json
import sys

import typer

from . import (  # noqa: F401  (registration)
    author_commands,  # noqa: F401
    capture_commands,
    dataset_commands,
    fetch_commands,  # noqa: F401
    judge_commands,
    report_commands,  # noqa: F401
)
from .common import app, default_dataset

__all__ = ["app", "default_dataset", "main"]


def main(argv: list[str] | None = None) -> int:
    """The console entry: usage errors (an unknown option, a missing value) are one line
    on stderr with exit code 2, or with --json one JSON document on stdout."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        return app(args=argv, prog_name="inference-kernels", standalone_mode=False) or 0
    except typer.Exit as done:
        return done.exit_code
    except typer.Abort:
        print("aborted", file=sys.stderr)
        return 130
    except typer.TyperException as error:  # click's usage errors (typer vendors click)
        if "--json" in argv:
            print(json.dumps({"error": error.format_message(), "exit_code": error.exit_code}))
        else:
            error.show()
        return error.exit_code
