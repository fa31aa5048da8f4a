"""Evaluating plan expressions at run time: the simulator's rules for plain values, Python's for tensors."""

from __future__ import annotations

import operator
from typing import Any

from wgc.sim import exprs as plain
from wgc.sim.exprs import Env

_TENSOR_OPS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "%": operator.mod,
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


def _is_tensor(v: Any) -> bool:
    return type(v).__module__.startswith("torch")


def _scalar(v: Any) -> Any:
    """A one-element tensor in a condition is its value."""
    return v.item() if _is_tensor(v) and v.numel() == 1 else v


def binary(op: str, a: Any, b: Any) -> Any:
    if (_is_tensor(a) or _is_tensor(b)) and op in _TENSOR_OPS:
        out = _TENSOR_OPS[op](a, b)
        return bool(out.all()) if op in ("==", "!=", "<", "<=", ">", ">=") and _is_tensor(out) else out
    return plain.binary(op, _scalar(a), _scalar(b))


class _Evaluator:
    def __init__(self) -> None:
        self.rules = dict(plain._RULES)
        self.rules[plain.EBinary] = lambda e, env: binary(e.op, self.eval(e.left, env), self.eval(e.right, env))
        self.rules[plain.EUnary] = lambda e, env: plain.unary(e.op, _scalar(self.eval(e.operand, env)))
        self.rules[plain.EIndex] = lambda e, env: _index(self.eval(e.base, env), self.eval(e.index, env))

    def eval(self, e: Any, env: Env) -> Any:
        return self.rules[type(e)](e, env)


def _index(base: Any, i: Any) -> Any:
    if _is_tensor(base):
        return base[int(_scalar(i))]
    return plain.index(base, _scalar(i))


_EVALUATOR = _Evaluator()


def evaluate(e: Any, env: Env) -> Any:
    return _EVALUATOR.eval(e, env)
