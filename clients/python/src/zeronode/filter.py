"""Selecting peers by their options (PROTOCOL.md 6.8): the filter operators, as the Rust
node applies them, so a filter reads the same whether a Python node or a router applies it.
"""

from __future__ import annotations

import math
import re
from typing import Any

_MISSING = object()


def _lookup(options: dict[str, Any], key: str) -> Any:
    if key in options:
        return options[key]
    value: Any = options
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _equal(a: Any, b: Any) -> bool:
    if _number(a) and _number(b):
        return bool(a == b)
    if type(a) is not type(b) and not (
        isinstance(a, (list, tuple)) and isinstance(b, (list, tuple))
    ):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def _js_string(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ",".join("" if x is None else _js_string(x) for x in v)
    if isinstance(v, dict):
        return "[object Object]"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _js_number(v: Any) -> float:
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if _number(v):
        return float(v)
    text = str(v).strip()
    if text == "":
        return 0.0
    try:
        if text.lower().startswith("0x"):
            return float(int(text, 16))
        return float(text)
    except ValueError:
        return math.nan


def _loose_equal(operand: Any, value: Any) -> bool:
    """JavaScript's ``operand == value`` for values off the wire."""
    containers = (list, tuple, dict)
    if isinstance(operand, containers) and isinstance(value, containers):
        return False
    if isinstance(operand, containers):
        operand = _js_string(operand)
    if isinstance(value, containers):
        value = _js_string(value)
    if isinstance(operand, str) and isinstance(value, str):
        return operand == value
    return _js_number(operand) == _js_number(value)


def _order(a: Any, b: Any) -> int | None:
    if _number(a) and _number(b):
        if (isinstance(a, float) and math.isnan(a)) or (isinstance(b, float) and math.isnan(b)):
            return None
        return int((a > b) - (a < b))
    if isinstance(a, str) and isinstance(b, str):
        return (a > b) - (a < b)
    return None


def _contains(value: Any, operand: Any) -> bool | None:
    if isinstance(value, (list, tuple)):
        return any(_equal(x, operand) for x in value)
    if isinstance(value, str):
        return isinstance(operand, str) and operand in value
    return None


def _holds(op: str, value: Any, operand: Any) -> bool:
    if op == "$eq":
        return _equal(value, operand)
    if op == "$ne":
        return not _equal(value, operand)
    if op == "$aeq":
        return _loose_equal(operand, value)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        c = _order(value, operand)
        if c is None:
            return False
        return {"$gt": c > 0, "$gte": c >= 0, "$lt": c < 0, "$lte": c <= 0}[op]
    if op == "$between":
        if not isinstance(operand, (list, tuple)) or len(operand) != 2:
            return False
        low, high = _order(value, operand[0]), _order(value, operand[1])
        return low is not None and high is not None and low >= 0 and high <= 0
    if op in ("$in", "$nin"):
        items = operand if isinstance(operand, (list, tuple)) else [operand]
        found = any(_equal(value, x) for x in items)
        return found if op == "$in" else not found
    if op == "$contains":
        return bool(_contains(value, operand))
    if op in ("$containsAny", "$containsNone"):
        items = operand if isinstance(operand, (list, tuple)) else [operand]
        results = [_contains(value, x) for x in items]
        if any(r is None for r in results):
            return False
        return any(results) if op == "$containsAny" else not any(results)
    if op == "$regex":
        return (
            isinstance(value, str) and isinstance(operand, str) and bool(re.search(operand, value))
        )
    return False


def matches(spec: dict[str, Any], options: dict[str, Any]) -> bool:
    """Whether a peer advertising ``options`` matches the filter ``spec``: every clause
    holds; a missing or null key fails every operator."""
    for key, clause in spec.items():
        value = _lookup(options, key)
        if value is _MISSING or value is None:
            return False
        if isinstance(clause, dict):
            if not all(_holds(op, value, operand) for op, operand in clause.items()):
                return False
        elif not _equal(value, clause):
            return False
    return True
