"""Mock values and mock components: deterministic stand-ins for every model part (the simulator, fake components).

Values are small ints, lists (accumulated channels, chunks) or None (an empty
stream item). A call returns blake2b(component, entry, arguments[, label state])
mod 13; small, so conditions such as `tok == llm.eos` (eos is its literal mod 13)
stop loops early now and then. A kv component keeps one state per cache label;
each call first folds (entry, arguments) into the label's state, so the order
of calls on a label shows in every later output. Python's `hash` is never used:
results are the same in every process.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wgc.plan.model import ComponentSpec

SMALL = 13  # outputs, consts and inputs are reduced modulo this
DEFAULT_LABEL = "default"

Value = Any  # int | float | str | bool | list | frozenset | None


def digest(*parts: Value) -> int:
    """A stable 64-bit hash of plain values (ints, floats, strings, lists, None)."""
    text = repr(_canon(parts)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def small(*parts: Value) -> int:
    return digest(*parts) % SMALL


def _canon(v: Value) -> Value:
    if isinstance(v, (list, tuple)):
        return tuple(_canon(x) for x in v)
    if isinstance(v, (set, frozenset)):
        return tuple(sorted(repr(x) for x in v))
    return v


def mock_input(name: str) -> int:
    """A named request input that the request did not give."""
    return small("input", name)


def mock_part(kind: str, index: int) -> int:
    """A synthetic payload for the index-th part of a request."""
    return small("part", kind, index)


def const_value(name: str, literal: Value) -> Value:
    if literal is None or isinstance(literal, bool):
        return small("const", name) if literal is None else literal
    if isinstance(literal, int):
        return literal % SMALL
    return literal


@dataclass(frozen=True)
class MockComponent:
    name: str
    kv: bool
    labels: tuple[str, ...] = ()
    consts: Mapping[str, Value] = field(default_factory=dict)

    @property
    def default_label(self) -> str:
        return self.labels[0] if self.labels else DEFAULT_LABEL

    def const(self, name: str) -> Value:
        return self.consts.get(name, small("const", self.name, name))

    @staticmethod
    def from_spec(spec: ComponentSpec) -> MockComponent:
        consts = {k: const_value(k, v) for k, v in spec.consts.items()}
        return MockComponent(spec.name, spec.engine == "kv", tuple(spec.labels), consts)


def components_by_name(items: Iterable[MockComponent]) -> dict[str, MockComponent]:
    return {c.name: c for c in items}


class MockEngine:
    """The cache-label states of one request on one rank (the reference has one per request)."""

    def __init__(self, components: Mapping[str, MockComponent]) -> None:
        self.components = components
        self.states: dict[tuple[str, str], int] = {}

    def label(self, component: str, label: str) -> str:
        return label or self.components[component].default_label

    def call(self, component: str, entry: str, args: list[Value], label: str = "") -> int:
        comp = self.components[component]
        if not comp.kv:
            return small(component, entry, args)
        key = (component, self.label(component, label))
        state = digest(self.states.get(key, 0), entry, args)
        self.states[key] = state
        return small(component, entry, args, state)

    def fork(self, component: str, target: str, source: str) -> None:
        self.states[(component, target)] = self.states.get((component, self.label(component, source)), 0)

    def snapshot(self, component: str, label: str) -> int:
        return self.states.get((component, self.label(component, label)), 0)

    def install(self, component: str, label: str, state: int) -> None:
        self.states[(component, self.label(component, label))] = state
