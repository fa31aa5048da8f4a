"""Evaluate plan expressions over mock values (both interpreters use this, so they agree exactly).

Operators are a table. Ints are taken modulo 2**31 and `/` on two ints is
floor division; floats follow Python; a zero divisor gives 0. An operation the
mock values cannot take (arithmetic on a list, ordering None) gives a hash of
its operands instead of failing: the mock computes something deterministic
for every well-typed program. Indexing a list takes an element (the index
modulo the length); indexing anything else hashes (value, index).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Protocol

from wgc.plan.model import EBinary, EConst, EIndex, ELit, EParam, EPartKind, EReq, EResult, EUnary, EVal, Expr
from wgc.sim.mock import Value, small

WRAP = 2**31


class Env(Protocol):
    """Where names in an expression come from."""

    def value(self, name: str) -> Value: ...  # a frame value; raises when undefined or freed

    def param(self, name: str) -> Value: ...

    def const(self, component: str, name: str) -> Value: ...

    def request(self, field: str) -> Value: ...

    def result(self, walk: str) -> Value: ...

    def part_kind(self) -> str: ...


def _is_int(v: Value) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Value) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _div(a: Value, b: Value) -> Value:
    if b == 0:
        return 0
    return a // b if _is_int(a) and _is_int(b) else a / b


def _mod(a: Value, b: Value) -> Value:
    return 0 if b == 0 else a % b


_ARITH: dict[str, Callable[[Value, Value], Value]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": _div, "%": _mod,
}
_ORDER: dict[str, Callable[[Value, Value], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


def _order_key(v: Value) -> Value:
    return v if _is_num(v) else small("order", v)


def _contains(a: Value, b: Value) -> bool:
    if isinstance(b, (set, frozenset, list, tuple)):
        return a in b
    if isinstance(b, str) and isinstance(a, str):
        return a in b
    return False


def binary(op: str, a: Value, b: Value) -> Value:
    if op in _ARITH:
        if _is_num(a) and _is_num(b):
            out = _ARITH[op](a, b)
            return out % WRAP if _is_int(out) else out
        return small(op, a, b)
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if op in _ORDER:
        return _ORDER[op](_order_key(a), _order_key(b))
    if op == "in":
        return _contains(a, b)
    if op == "and":
        return bool(a) and bool(b)
    if op == "or":
        return bool(a) or bool(b)
    raise ValueError(f"unknown operator `{op}`")


def unary(op: str, a: Value) -> Value:
    if op == "not":
        return not a
    if op == "-":
        if _is_int(a):
            return (-a) % WRAP
        return -a if _is_num(a) else small("neg", a)
    raise ValueError(f"unknown operator `{op}`")


def index(base: Value, i: Value) -> Value:
    if isinstance(base, list):
        return base[int(i) % len(base)] if base and _is_num(i) else None
    return small("index", base, i)


def evaluate(e: Expr, env: Env) -> Value:
    return _RULES[type(e)](e, env)


_RULES: dict[type, Callable[[Expr, Env], Value]] = {
    ELit: lambda e, env: e.value,
    EVal: lambda e, env: env.value(e.name),
    EParam: lambda e, env: env.param(e.name),
    EConst: lambda e, env: env.const(e.component, e.name),
    EReq: lambda e, env: env.request(e.field),
    EResult: lambda e, env: env.result(e.walk),
    EPartKind: lambda e, env: env.part_kind(),
    EUnary: lambda e, env: unary(e.op, evaluate(e.operand, env)),
    EBinary: lambda e, env: binary(e.op, evaluate(e.left, env), evaluate(e.right, env)),
    EIndex: lambda e, env: index(evaluate(e.base, env), evaluate(e.index, env)),
}
