"""Shared by the Orpheus tests: component specs, the compiled plan, a scripted language model."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from wgc.models.orpheus.config import END_OF_SPEECH
from wgc.runtime.components.base import Call, Component

from wgc.compile import compile_program
from wgc.plan.model import ComponentSpec, Plan

ROOT = Path(__file__).resolve().parents[3]


def llm_spec(page_size: int = 16, kv_memory: int | None = 16 << 20, **settings: Any) -> ComponentSpec:
    if kv_memory is not None:
        settings["kv_memory"] = kv_memory
    return ComponentSpec("llm", "wgc.models.orpheus.LanguageModel", "kv", [], {"eos": END_OF_SPEECH}, [],
                         {"dtype": "bf16"}, [0], 1, {"page_size": page_size, "max_batch": 16, **settings})


def snac_spec() -> ComponentSpec:
    return ComponentSpec("snac", "wgc.models.orpheus.SnacDecoder", "stateless", [], {}, [], {"dtype": "f32"}, [0], 1,
                         {"max_batch": 16})


@lru_cache(maxsize=1)
def orpheus_plan() -> Plan:
    """models/orpheus.walk compiled for placements/cpu.toml."""
    source = ROOT / "models" / "orpheus.walk"
    compiled = compile_program(str(source), source.read_text(encoding="utf-8"), str(ROOT / "placements" / "cpu.toml"))
    assert compiled.plan is not None and compiled.data is not None, [d.message for d in compiled.diagnostics]
    return compiled.plan


class ScriptedLLM(Component):
    """Stands in for `llm`: request whose prompt is "k" writes scripts[k], then end-of-speech forever."""

    def __init__(self, spec: ComponentSpec, rank: int, device: str, scripts: list[list[int]]) -> None:
        super().__init__(spec, rank, device)
        self.scripts = scripts
        self.script: dict[int, int] = {}  # request → script index
        self.done: dict[int, int] = {}  # request → tokens written

    def _next(self, request: int) -> int:
        script = self.scripts[self.script[request]]
        n = self.done[request]
        self.done[request] = n + 1
        return script[n] if n < len(script) else END_OF_SPEECH

    def prefill(self, calls: list[Call]) -> list[int]:
        for c in calls:
            self.script[c.request], self.done[c.request] = int(c.args[0]), 0
        return [self._next(c.request) for c in calls]

    def decode(self, calls: list[Call]) -> list[int]:
        return [self._next(c.request) for c in calls]

    def checkpoint(self, request: int, label: str) -> Any:
        return self.done.get(request, 0)

    def restore(self, request: int, label: str, checkpoint: Any) -> None:
        self.done[request] = checkpoint

    def release(self, request: int) -> None:
        self.script.pop(request, None)
        self.done.pop(request, None)

    def counters(self) -> dict[str, int]:
        return {"requests": len(self.script)}
