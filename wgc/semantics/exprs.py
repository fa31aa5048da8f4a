"""The environment a plan expression reads, and the one dispatch over expression kinds.

Two sets of rules give the operators a meaning (`Rules`): mock values (mock_exprs.py: the simulator
and fake components, so the two agree exactly) and run-time values (python_exprs.py). How names are
looked up and how an expression tree is walked is the same for both, and written here once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from wgc.plan.model import EBinary, EConst, EIndex, ELit, EParam, EPartKind, EReq, EResult, EUnary, EVal, Expr


class Env(Protocol):
    """Where names in an expression come from."""

    def value(self, name: str) -> Any: ...  # a frame value; raises when undefined or freed

    def param(self, name: str) -> Any: ...

    def const(self, component: str, name: str) -> Any: ...

    def request(self, field: str) -> Any: ...

    def result(self, walk: str) -> Any: ...

    def part_kind(self) -> str: ...


Evaluate = Callable[[Expr, Env], Any]


@dataclass(frozen=True)
class Rules:
    """What the operators mean over one kind of value."""

    binary: Callable[[str, Any, Any], Any]
    unary: Callable[[str, Any], Any]
    index: Callable[[Any, Any], Any]


def evaluator(rules: Rules) -> Evaluate:
    """`evaluate(expr, env)` under `rules`: names from `env`, operators from `rules`."""
    binary, unary, index = rules.binary, rules.unary, rules.index

    def evaluate(e: Expr, env: Env) -> Any:
        return table[type(e)](e, env)

    table: dict[type, Callable[[Any, Env], Any]] = {
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
    return evaluate
