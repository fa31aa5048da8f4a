"""What a plan expression can read at run time: a walk's values, the request, params, consts, results.

One environment for the coordinator (flow starts) and the workers (instructions, flow transitions).
Consts are resolved once per plan: with fake components they take the simulator's mock values, so
conditions such as `tok == llm.eos` agree with the simulator; otherwise the declared literal.
"""

from __future__ import annotations

from typing import Any

from wgc.runtime.protocol.messages import RequestInit

from wgc.plan.model import Plan
from wgc.semantics.mock import MockComponent

Consts = dict[tuple[str, str], Any]
_EMPTY: dict[str, Any] = {}


def const_table(plan: Plan, fake: bool) -> Consts:
    table: Consts = {}
    for spec in plan.components:
        mock = MockComponent.from_spec(spec) if fake else None
        for name, literal in spec.consts.items():
            table[(spec.name, name)] = mock.const(name) if mock is not None else literal
    return table


class RequestEnv:
    """An `Env` (wgc/semantics/exprs.py) over one request; `frame` is the running walk's values, if any."""

    __slots__ = ("consts", "frame", "init", "part", "results")

    def __init__(self, consts: Consts, init: RequestInit, frame: dict[str, Any] | None = None,
                 results: dict[str, Any] | None = None, part: str | None = None) -> None:
        self.consts, self.init, self.frame = consts, init, frame if frame is not None else _EMPTY
        self.results, self.part = results if results is not None else _EMPTY, part

    def value(self, name: str) -> Any:
        return self.frame[name]  # KeyError: freed or never set; the caller says where

    def param(self, name: str) -> Any:
        return self.init.params[name]

    def const(self, component: str, name: str) -> Any:
        return self.consts.get((component, name))

    def request(self, field: str) -> Any:
        init = self.init
        if field == "task":
            return init.task
        if field == "think":
            return init.think
        if field == "inputs":
            return frozenset(init.input_modalities)
        if field == "outputs":
            return frozenset(init.output_modalities)
        return [p.kind for p in init.parts]  # "parts": the checker admits no other field

    def result(self, walk: str) -> Any:
        return self.results.get(walk)

    def part_kind(self) -> str:
        return self.part or ""
