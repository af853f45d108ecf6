"""Evaluate a definition's constraints: Python expressions over axes and input values.

A constraint such as ``"Np >= 1"`` names only axes; ``"total_seq_len ==
cu_seqlens[-1].item()"`` also reads an input. Expressions are parsed and checked
against a small grammar (names, numbers, arithmetic, comparisons, boolean logic,
subscripts, and a few whitelisted calls and tensor methods), then evaluated with no
builtins beyond those. A constraint that names an input is evaluated only when the
input's value is at hand; otherwise it is reported as deferred.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from typing import Any

_FUNCTIONS = {
    "min": min,
    "max": max,
    "abs": abs,
    "int": int,
    "bool": bool,
    "len": len,
    "ceil_div": lambda a, b: -(-a // b),
    "floor": math.floor,
}
_METHODS = {
    "all",
    "any",
    "min",
    "max",
    "sum",
    "item",
    "numel",
    "unique",
    "sort",
    "diff",
    "long",
    "int",
    "count_nonzero",
    "ne",
    "eq",
    "ge",
    "gt",
    "le",
    "lt",
    "isfinite",
    "flatten",
}
_NODES = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.USub,
    ast.UAdd,
    ast.Invert,
    ast.BinOp,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.FloorDiv,
    ast.Mod,
    ast.Pow,
    ast.BitAnd,
    ast.BitOr,
    ast.Compare,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.Name,
    ast.Load,
    ast.Constant,
    ast.Call,
    ast.Attribute,
    ast.Subscript,
    ast.Slice,
    ast.Tuple,
    ast.keyword,
)


class ConstraintSyntaxError(ValueError):
    pass


def parse(expression: str) -> tuple[ast.Expression, set[str]]:
    """Parse and vet one constraint; return its tree and the names it reads."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as error:
        raise ConstraintSyntaxError(f"not a Python expression: {error.msg}") from None
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, _NODES):
            raise ConstraintSyntaxError(f"{type(node).__name__} is not allowed")
        if isinstance(node, ast.Attribute) and node.attr not in _METHODS:
            raise ConstraintSyntaxError(f"method {node.attr!r} is not allowed")
        if isinstance(node, ast.Call):
            function = node.func
            if isinstance(function, ast.Name) and function.id not in _FUNCTIONS:
                raise ConstraintSyntaxError(f"function {function.id!r} is not allowed")
        if isinstance(node, ast.Name) and node.id not in _FUNCTIONS:
            names.add(node.id)
    return tree, names


def evaluate(expression: str, values: Mapping[str, Any]) -> bool | None:
    """True or False, or None when a name it reads is not in ``values`` (deferred).

    Raises ConstraintSyntaxError for a malformed constraint and ValueError when the
    expression fails on the given values.
    """
    tree, names = parse(expression)
    if not names <= set(values):
        return None
    scope = dict(_FUNCTIONS)
    scope.update({name: values[name] for name in names})
    try:
        result = eval(compile(tree, "<constraint>", "eval"), {"__builtins__": {}}, scope)
        return bool(result)
    except Exception as error:
        raise ValueError(f"cannot evaluate: {type(error).__name__}: {error}") from None
