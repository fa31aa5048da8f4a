"""Closures the interpreter runs in place of the general evaluator, for what a decode loop evaluates every
row every step: frame values, literals, params, consts and binary operators over them, and a RUN's
argument list as one tuple. The general evaluator built a RequestEnv and dispatched on every node
(three evaluations a row a step in the llama plan's decode); a closure is one call.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from wgc.runtime.worker.instance import Instance
from wgc.runtime.worker.request_state import RequestState

from wgc.plan import model as m
from wgc.semantics.python_exprs import binary

Getter = Callable[[Instance], Any]

# The comparisons `binary` makes with these operators: a plain bool result is `binary`'s result too
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def compile_expr(e: m.Expr, fake: bool, states: dict[int, RequestState], consts: dict[tuple[str, str], Any]
                 ) -> Getter | None:
    """`e` as one closure over the instance. A missing value raises KeyError, as the evaluator's
    lookups do. None for any other kind, and for every kind but frame values and literals with fake
    components (`fake`: the mock-value rules are the evaluator's)."""
    if isinstance(e, m.EVal):
        name = e.name
        return lambda inst: inst.frame[name]
    if isinstance(e, m.ELit):
        value = e.value
        return lambda inst: value
    if fake:
        return None
    if isinstance(e, m.EParam):
        param = e.name
        return lambda inst: states[inst.request].init.params[param]  # type: ignore[union-attr]
    if isinstance(e, m.EConst):
        const = consts.get((e.component, e.name))
        return lambda inst: const
    if isinstance(e, m.EBinary) and e.op not in ("and", "or"):  # and/or: the evaluator's short circuit
        left, right = compile_expr(e.left, fake, states, consts), compile_expr(e.right, fake, states, consts)
        if left is None or right is None:
            return None
        op = e.op
        compare = _COMPARE.get(op)
        if compare is not None:  # the decode loop's stop (`tok == lm.eos`)
            return _comparison(op, compare, left, right)
        return lambda inst: binary(op, left(inst), right(inst))
    return None


def _comparison(op: str, compare: Callable[[Any, Any], Any], left: Getter, right: Getter) -> Getter:
    """`binary(op, ...)` over the two operands, the operator called directly when it gives a bool
    (numbers, strings); anything else (a tensor's elementwise result) goes through `binary`."""
    def run(inst: Instance) -> Any:
        a, b = left(inst), right(inst)
        out = compare(a, b)
        return out if out.__class__ is bool else binary(op, a, b)
    return run


def tupler(getters: list[Getter]) -> Callable[[Instance], tuple[Any, ...]]:
    """The getters' values as one tuple, evaluated left to right (up to four written out)."""
    if len(getters) == 1:
        g0, = getters
        return lambda inst: (g0(inst),)
    if len(getters) == 2:
        g0, g1 = getters
        return lambda inst: (g0(inst), g1(inst))
    if len(getters) == 3:
        g0, g1, g2 = getters
        return lambda inst: (g0(inst), g1(inst), g2(inst))
    if len(getters) == 4:
        g0, g1, g2, g3 = getters
        return lambda inst: (g0(inst), g1(inst), g2(inst), g3(inst))
    return lambda inst: tuple([g(inst) for g in getters])
