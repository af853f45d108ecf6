"""Evaluate a definition's constraints: Python expressions over axes and input values.

A constraint such as ``"Np >= 1"`` names only axes; ``"total_seq_len ==
cu_seqlens[-1].item()"`` also reads an input. Expressions are parsed and checked
against a small grammar (names, numbers, arithmetic, comparisons, boolean logic,
subscripts, and a few whitelisted calls and tensor methods), then evaluated with no
builtins beyond those. A constraint that names an input is evaluated only when the
input's value is at hand; otherwise it is reported as deferred.

The one attribute that is not a method is ``.shape``, and only directly on a name, as
flashinfer-bench's published definitions use it (``"sparse_indices.shape[-1] ==
topk"``, ``"gemm1_weights.shape[1] == 2 * intermediate_size"``). A constraint that
reads inputs only through ``.shape`` needs no tensor: given the inputs' shapes (from
the workload's axes), it is evaluated against them instead of being deferred.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from typing import Any

import torch

_FUNCTIONS = {
    "min": min,
    "max": max,
    "abs": abs,
    "int": int,
    "bool": bool,
    "len": len,
    "ceil_div": lambda a, b: -(-a // b),
    "floor": math.floor,
    "arange": torch.arange,
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


class _ShapeOnly:
    """Stands for an input whose shape is known but whose values are not: it has
    ``.shape`` (a ``torch.Size``, as a tensor's is) and nothing else."""

    __slots__ = ("shape",)

    def __init__(self, shape: Any) -> None:
        self.shape = torch.Size(int(size) for size in shape)


def _attribute_problem(node: ast.Attribute) -> str | None:
    if node.attr == "shape":
        value = node.value
        if not isinstance(value, ast.Name) or value.id in _FUNCTIONS:
            return "'.shape' is allowed only directly on an input's name"
        return None
    if node.attr not in _METHODS:
        return f"attribute {node.attr!r} is not allowed (only .shape and whitelisted methods)"
    if isinstance(node.value, ast.Constant):
        return f"method {node.attr!r} on a constant is not allowed"
    return None


def _value_names(tree: ast.AST) -> set[str]:
    """The names read other than as ``name.shape``."""
    shape_reads = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "shape"
    }
    return {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and node.id not in _FUNCTIONS and id(node) not in shape_reads
    }


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
        if isinstance(node, ast.Attribute) and (problem := _attribute_problem(node)):
            raise ConstraintSyntaxError(problem)
        if isinstance(node, ast.Call):
            function = node.func
            if isinstance(function, ast.Name) and function.id not in _FUNCTIONS:
                raise ConstraintSyntaxError(f"function {function.id!r} is not allowed")
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            raise ConstraintSyntaxError(f"name {node.id!r} is not allowed")
        if isinstance(node, ast.Name) and node.id not in _FUNCTIONS:
            names.add(node.id)
    return tree, names


def needs_values(expression: str, inputs: set[str]) -> bool:
    """Whether the constraint reads one of ``inputs`` other than through ``.shape``."""
    tree, _ = parse(expression)
    return bool(_value_names(tree) & inputs)


def compute(expression: str, scope: Mapping[str, Any]) -> Any:
    """The value of ``expression``, vetted as a constraint is, over ``scope`` (names ->
    numbers or tensors). Raises ConstraintSyntaxError for a malformed expression and
    ValueError for a name not in ``scope`` or an evaluation that fails."""
    tree, names = parse(expression)
    missing = names - set(scope)
    if missing:
        raise ValueError(f"unknown name(s): {', '.join(sorted(missing))}")
    try:
        code = compile(tree, "<expression>", "eval")
        return eval(code, {"__builtins__": {}}, {**_FUNCTIONS, **scope})
    except Exception as error:
        raise ValueError(f"cannot evaluate: {type(error).__name__}: {error}") from None


def evaluate(
    expression: str,
    values: Mapping[str, Any],
    shapes: Mapping[str, Any] | None = None,
) -> bool | None:
    """True or False, or None when a name it reads is not in ``values`` (deferred).

    A name missing from ``values`` that the expression reads only as ``name.shape`` is
    taken from ``shapes`` (name -> sizes) when it is there: such a constraint needs the
    input's shape, not its values.

    Raises ConstraintSyntaxError for a malformed constraint and ValueError when the
    expression fails on the given values.
    """
    tree, names = parse(expression)
    missing = names - set(values)
    if missing and (shapes is None or not missing <= set(shapes) or missing & _value_names(tree)):
        return None
    scope: dict[str, Any] = dict(_FUNCTIONS)
    scope.update({name: values[name] for name in names - missing})
    scope.update({name: _ShapeOnly(shapes[name]) for name in missing})  # type: ignore[index]
    try:
        result = eval(compile(tree, "<constraint>", "eval"), {"__builtins__": {}}, scope)
        return bool(result)
    except Exception as error:
        raise ValueError(f"cannot evaluate: {type(error).__name__}: {error}") from None
