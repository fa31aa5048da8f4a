"""Toy components: exact, tiny, inspectable. Each records how it was called so tests can count batches."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from wgc.runtime.components.base import Call, Component
from wgc.runtime.engines.capture_report import CaptureReport


class Recording(Component):
    def __init__(self, spec, rank, device) -> None:
        super().__init__(spec, rank, device)
        self.batches: list[tuple[str, int]] = []  # (entry, batch size) per call
        self.state: dict[tuple[int, str], list[Any]] = {}  # (request, label) → history (a KV stand-in)

    def call(self, entry: str, calls: list[Call]) -> list[Any]:
        self.batches.append((entry, len(calls)))
        return super().call(entry, calls)

    def _hist(self, c: Call) -> list[Any]:
        return self.state.setdefault((c.request, c.label or self.default_label()), [])

    def fork(self, request: int, target: str, source: str) -> None:
        self.state[(request, target)] = list(self.state.get((request, source or self.default_label()), []))

    def export_label(self, request: int, label: str) -> Any:
        return list(self.state.get((request, label), []))

    def import_label(self, request: int, label: str, state: Any) -> None:
        self.state[(request, label)] = list(state)

    def checkpoint(self, request: int, label: str) -> Any:
        return len(self.state.get((request, label), []))

    def restore(self, request: int, label: str, checkpoint: Any) -> None:
        del self.state.setdefault((request, label), [])[checkpoint:]

    def release(self, request: int) -> None:
        for key in [k for k in self.state if k[0] == request]:
            del self.state[key]

    def counters(self) -> dict[str, int]:
        return {"requests": len({k[0] for k in self.state})}


class Counter(Recording):
    """A token generator: prefill gives the prompt's length, decode adds one; its KV is the token history."""

    def prefill(self, calls: list[Call]) -> list[Any]:
        out = []
        for c in calls:
            self._hist(c).append(len(str(c.args[0])))
            out.append(len(str(c.args[0])))
        return out

    def see(self, calls: list[Call]) -> list[Any]:
        return self.prefill(calls)

    def decode(self, calls: list[Call]) -> list[Any]:
        out = []
        for c in calls:
            self._hist(c).append(c.args[0] + 1)
            out.append(c.args[0] + 1)
        return out

    def history(self, calls: list[Call]) -> list[Any]:
        return [list(self._hist(c)) for c in calls]

    def velocity(self, calls: list[Call]) -> list[Any]:
        weights = {"main": 1, "cfg_text": 10, "cfg_img": 100}
        return [c.args[0] * 0 + weights.get(c.label, 1) + c.args[1] for c in calls]


class Mixer(Recording):
    def step(self, calls: list[Call]) -> list[Any]:
        return [c.args[0] + sum(c.args[1:]) for c in calls]

    def add(self, calls: list[Call]) -> list[Any]:
        return [c.args[0] + c.args[1] for c in calls]

    def chunk(self, calls: list[Call]) -> list[Any]:
        return [list(c.args[0]) if isinstance(c.args[0], list) else c.args[0] for c in calls]

    def frame(self, calls: list[Call]) -> list[Any]:
        return [(c.args[0] if c.args[0] is not None else -1) * 10 for c in calls]


CAPTURE_SECONDS = 0.3


class Capturing(Counter):
    """A Counter whose CUDA-graph capture takes CAPTURE_SECONDS and "captures" every bucket it is given.

    Each call is recorded (entry, walk, buckets, start, end: time.time()), and its last progress line
    says when it ended, so a test in another process can compare that with the moment of readiness.
    """

    def __init__(self, spec, rank, device) -> None:
        super().__init__(spec, rank, device)
        self.captured: list[tuple[str, str, list[int], float, float]] = []
        self.warmed: list[float] = []  # when each warm-up ended (time.time())

    def warm_up(self, progress: Callable[[str], None]) -> None:
        progress("warmed the toy's shapes")
        self.warmed.append(time.time())

    def capture(self, entry: str, walk: str, buckets: list[int], progress: Callable[[str], None]) -> CaptureReport:
        start = time.time()
        time.sleep(CAPTURE_SECONDS)
        for bucket in buckets:
            progress(f"captured bucket {bucket}")
        end = time.time()
        self.captured.append((entry, walk, list(buckets), start, end))
        progress(f"toy capture of {entry} for walk {walk} with buckets {buckets} ended at {end:.6f}")
        return CaptureReport(captured=list(buckets))


class ExplodingCapture(Mixer):
    """A Mixer whose capture raises: the rank must report it and serve the entry eagerly."""

    def capture(self, entry: str, walk: str, buckets: list[int], progress: Callable[[str], None]) -> CaptureReport:
        raise ValueError(f"toy capture of {entry} exploded\nwith a second line")

    def warm_up(self, progress: Callable[[str], None]) -> None:
        raise RuntimeError("toy warm-up exploded")
