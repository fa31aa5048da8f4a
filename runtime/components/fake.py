"""Fake components: any plan runs end to end with no weights (the NULL path, `wgc run --fake`).

Every entry of every component answers with the simulator's mock semantics
(wgc/semantics/mock.py), so the runtime's outputs on fake components must equal the
simulator's and the reference interpreter's for the same request: the three
are tested against each other.
"""

from __future__ import annotations

from typing import Any

from wgc.runtime.components.base import Call, Component

from wgc.plan.model import ComponentSpec
from wgc.semantics.mock import MockComponent, MockEngine


class FakeComponent(Component):
    def __init__(self, spec: ComponentSpec, rank: int, device: str) -> None:
        super().__init__(spec, rank, device)
        self.mock = MockComponent.from_spec(spec)
        self.engines: dict[int, MockEngine] = {}
        self.calls = 0  # entry invocations served, for tests that count speculation

    def _engine(self, request: int) -> MockEngine:
        engine = self.engines.get(request)
        if engine is None:
            engine = self.engines[request] = MockEngine({self.spec.name: self.mock})
        return engine

    def call(self, entry: str, calls: list[Call]) -> list[Any]:
        self.calls += len(calls)
        return [self._engine(c.request).call(self.spec.name, entry, list(c.args), c.label) for c in calls]

    def fork(self, request: int, target: str, source: str) -> None:
        self._engine(request).fork(self.spec.name, target, source)

    def export_label(self, request: int, label: str) -> Any:
        return self._engine(request).snapshot(self.spec.name, label)

    def import_label(self, request: int, label: str, state: Any) -> None:
        self._engine(request).install(self.spec.name, label, state)

    def checkpoint(self, request: int, label: str) -> Any:
        return self._engine(request).snapshot(self.spec.name, label)

    def restore(self, request: int, label: str, checkpoint: Any) -> None:
        self._engine(request).install(self.spec.name, label, checkpoint)

    def release(self, request: int) -> None:
        self.engines.pop(request, None)

    def counters(self) -> dict[str, int]:
        return {"requests": len(self.engines), "labels": sum(len(e.states) for e in self.engines.values())}
