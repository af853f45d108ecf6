"""Whether a definition's reference defines ``run`` over the declared inputs, in order."""

from __future__ import annotations

import ast

from ..schema import Definition


def signature_problem(definition: Definition) -> str | None:
    """Why the reference does not define ``run`` over the declared inputs in order, if so."""
    try:
        tree = ast.parse(definition.reference)
    except SyntaxError as error:
        return f"does not parse: {error.msg} (line {error.lineno})"
    runs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run"]
    if not runs:
        return "defines no top-level function 'run'"
    arguments = runs[-1].args
    if arguments.vararg or arguments.kwarg or arguments.kwonlyargs or arguments.posonlyargs:
        return "run must take exactly the declared inputs as plain parameters"
    names = [argument.arg for argument in arguments.args]
    if names != list(definition.inputs):
        return f"run takes ({', '.join(names)}), inputs are ({', '.join(definition.inputs)})"
    return None
