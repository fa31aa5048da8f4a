"""The tiny Orpheus cluster that the scheduling tests and bench/scheduler.py share: the walk as
compiled for placements/cpu.toml, in process, with the real tiny LM on a pool of `pages` 16-token
pages, a token budget and prefix caching on or off; the LM records every call and token."""

from __future__ import annotations

import time
from typing import Any

import msgspec
from wgc.models.orpheus import LanguageModel
from wgc.runtime.components.base import Call, Component, load_class
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.process.local import LocalCluster

from tests.models.orpheus.helpers import orpheus_plan
from wgc.plan.model import ComponentSpec

PAGE = 16
PAGE_BYTES = 2 * 4 * 2 * 32 * 4 * PAGE  # K and V × 4 layers × 2 kv heads × 32 dims × 4 B (the tiny preset)


class RecordingLM(LanguageModel):
    """The tiny LM, recording each request's tokens (and the perf_counter time each was returned) and
    every call: (entry, [(request, tokens written)])."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tokens: dict[int, list[int]] = {}
        self.stamps: dict[int, list[float]] = {}  # request → when each of its tokens came out
        self.log: list[tuple[str, list[tuple[int, int]]]] = []
        self.on_decode: Any = None  # called after each decode call with its batch size

    def prefill(self, calls: list[Call]) -> list[Any]:
        return self._logged("prefill", calls, super().prefill, calls)

    def decode(self, calls: list[Call]) -> list[Any]:
        out = self._logged("decode", calls, super().decode, calls)
        if self.on_decode is not None:
            self.on_decode(len(calls))
        return out

    def _logged(self, entry: str, calls: list[Call], run: Any, *args: Any) -> list[Any]:
        before = [self.kv.length(c.request, self.label_of(c)) for c in calls]
        out = run(*args)
        now = time.perf_counter()
        self.log.append((entry, [(c.request, self.kv.length(c.request, self.label_of(c)) - n)
                                 for c, n in zip(calls, before)]))
        for c, token in zip(calls, out):
            if isinstance(token, int):
                self.tokens.setdefault(c.request, []).append(token)
                self.stamps.setdefault(c.request, []).append(now)
        return out


def cluster(pages: int, budget: int | None = None, caching: bool = True) -> tuple[LocalCluster, list[Component]]:
    made: list[Component] = []

    def factory(spec: ComponentSpec, rank: int) -> Component:
        if spec.name == "llm":
            settings = {**spec.settings, "kv_memory": pages * PAGE_BYTES, "page_size": PAGE, "prefix_caching": caching,
                        "token_budget": budget or 1 << 20}
            made.append(RecordingLM(msgspec.structs.replace(spec, settings=settings), rank, "cpu", preset="tiny"))
        else:
            made.append(load_class(spec.cls).tiny(spec, rank, "cpu"))
        return made[-1]

    return LocalCluster(orpheus_plan(), factory, fake_inputs=False, rounds=1), made  # rounds: as a worker runs


def lm_of(made: list[Component]) -> RecordingLM:
    return next(c for c in made if isinstance(c, RecordingLM))


def speech(text: str, max_tokens: int, voice: str = "tara", temperature: float = 0.0) -> RequestSpec:
    return RequestSpec(params={"max_tokens": max_tokens, "voice": voice, "temperature": temperature},
                       inputs={"prompt": text}, output_modalities=["audio"])
