"""`tiny(spec, rank, device)`: a family's component on its `tiny` preset (random weights), the one way the
tests, benches and demos build one without a checkpoint. Every weights-backed component takes a
`preset` keyword; this mixin gives each of them the same constructor instead of a copy per class."""

from __future__ import annotations

from typing import Any, Self


class TinyPreset:
    @classmethod
    def tiny(cls, spec: Any, rank: int, device: str) -> Self:
        return cls(spec, rank, device, preset="tiny")  # type: ignore[call-arg]
