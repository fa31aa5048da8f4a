"""Expression rules over run-time values, with Python's own operators (ints, floats, strings, tensors).

The simulator evaluates with mock-value rules (mock_exprs.py: wrapped ints, hashes for operations
mock values cannot take); a real run must not invent values, so an operation that makes no sense here
raises and fails the request with the instruction's position. Tensors are recognised by their module,
so this module never imports torch.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from wgc.semantics import mock_exprs
from wgc.semantics.exprs import Evaluate, Rules, evaluator

_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "%": operator.mod,
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "in": lambda a, b: a in b,
}
_COMPARISONS = {"==", "!=", "<", "<=", ">", ">="}


def _is_tensor(v: Any) -> bool:
    return type(v).__module__.startswith("torch")


def _scalar(v: Any) -> Any:
    """A one-element tensor in a condition or an index is its value."""
    return v.item() if _is_tensor(v) and v.numel() == 1 else v


def binary(op: str, a: Any, b: Any) -> Any:
    if op == "and":
        return bool(_scalar(a)) and bool(_scalar(b))
    if op == "or":
        return bool(_scalar(a)) or bool(_scalar(b))
    if op == "/" and isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
        return a // b if b else 0  # integer division of ints, as the language's int type promises
    out = _BINARY[op](a, b)
    if op in _COMPARISONS and _is_tensor(out):
        return bool(out.all())
    return out


def unary(op: str, a: Any) -> Any:
    return (not _scalar(a)) if op == "not" else -a


def _index(base: Any, i: Any) -> Any:
    return base[int(_scalar(i))]


evaluate = evaluator(Rules(binary, unary, _index))


def evaluator_for(fake: bool) -> Evaluate:
    """Mock-value rules for fake components (they must agree with the simulator), Python's otherwise."""
    return mock_exprs.evaluate if fake else evaluate
