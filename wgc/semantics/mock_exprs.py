"""Expression rules over mock values: the simulator's, and the runtime's on fake components, so they agree exactly.

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

from wgc.semantics.exprs import Rules, evaluator
from wgc.semantics.mock import Value, small

WRAP = 2**31


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


evaluate = evaluator(Rules(binary, unary, index))
