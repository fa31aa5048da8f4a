"""Lexical scopes of a walk body: what each name means and whether it was read."""

from __future__ import annotations

from dataclasses import dataclass, field

from wgc.check.types import Ty
from wgc.lang.span import Span


@dataclass
class Binding:
    ty: Ty
    span: Span
    kind: str  # "value", "input", "index", "carry", "yield"
    read: bool = False


@dataclass
class Scope:
    """`kind` is "walk", "loop" (a loop body) or "branch" (one parallel branch)."""

    kind: str
    parent: Scope | None = None
    names: dict[str, Binding] = field(default_factory=dict)
    carried: set[str] = field(default_factory=set)

    def lookup(self, name: str) -> tuple[Binding, Scope] | None:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name], scope
            scope = scope.parent
        return None

    def visible(self) -> set[str]:
        out: set[str] = set()
        scope: Scope | None = self
        while scope is not None:
            out.update(scope.names)
            scope = scope.parent
        return out

    def all_bindings(self) -> list[tuple[str, Binding]]:
        return list(self.names.items())
