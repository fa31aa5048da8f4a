"""Every rank in one thread: the executors, the coordinator core and an in-memory wire between them.

Used by tests (deterministic, fast) and by the benchmarks as the baseline
without sockets. Every message still goes through the wire codec, so what
works here is encodable for the real transport.

Start-up is a worker's (runtime/worker/startup.py): each rank loads its components, then captures
the CUDA graphs the plan lists for it; the cluster is ready (`ready_at`) when its constructor
returns. The start-up lines are in `startup_log` (and the `wgc.runtime.startup` logger), each
rank's capture results in `captures`.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from wgc.runtime.components.base import Component
from wgc.runtime.components.fake import FakeComponent
from wgc.runtime.coordinator.core import CoordinatorCore, Event
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.engines.capture_report import EntryCapture
from wgc.runtime.protocol.codec import Codec
from wgc.runtime.protocol.messages import COORDINATOR, Message
from wgc.runtime.worker.executor import Executor, Options
from wgc.runtime.worker.startup import start_rank

from wgc.plan.model import ComponentSpec, Plan

Factory = Callable[[ComponentSpec, int], Component]
log = logging.getLogger("wgc.runtime.startup")


def fake_factory(spec: ComponentSpec, rank: int) -> Component:
    return FakeComponent(spec, rank, "cpu")


class LocalCluster:
    def __init__(self, plan: Plan, factory: Factory = fake_factory, fake_inputs: bool = True,
                 encode: bool = True, rounds: int | None = None) -> None:
        """`rounds`: batched rounds a rank runs before messages are delivered again (a worker process
        runs one, so that requests arriving meanwhile join the next round); None: until it blocks."""
        self.plan = plan
        self.rounds = rounds
        self.codec = Codec() if encode else None
        self.wire: deque[tuple[int, Message]] = deque()
        self.coordinator = CoordinatorCore(plan, self._send, fake_inputs)
        self.executors: list[Executor] = []
        self.startup_log: list[tuple[float, int, str]] = []  # (time.time(), rank, line)
        self.captures: dict[int, list[EntryCapture]] = {}
        for rank in plan.ranks:
            r = rank.rank
            started = start_rank(plan, r, lambda spec, r=r: factory(spec, r),
                                 lambda line, step=None, r=r: self._progress(r, line))
            self.captures[r] = started.captures
            self.executors.append(Executor(plan, r, started.components, self._send, Options(fake_inputs=fake_inputs)))
        self.ready_at = time.time()
        self.delivered = 0

    def _progress(self, rank: int, line: str) -> None:
        if line:  # "" only moves a phase on (startup.Step): nothing to log
            self.startup_log.append((time.time(), rank, line))
            log.info("%s", line)

    def _send(self, destination: int, msg: Message) -> None:
        if self.codec is not None:
            msg = self.codec.decode(self.codec.encode(msg))
        self.wire.append((destination, msg))

    def pump(self, limit: int = 10_000_000) -> None:
        """Deliver messages and run executors until nothing moves.

        Like a worker draining its socket before it schedules, each rank takes every message
        already waiting for it, then runs: requests that arrive together are batched together.
        """
        for ex in self.executors:
            ex.run(self.rounds)
        while limit > 0 and (self.wire or (self.rounds is not None and any(ex.ready for ex in self.executors))):
            waiting = min(len(self.wire), limit)
            limit -= max(waiting, 1)
            touched: set[int] = set()
            for _ in range(waiting):
                destination, msg = self.wire.popleft()
                self.delivered += 1
                if destination == COORDINATOR:
                    self.coordinator.on_message(msg)
                else:
                    self.executors[destination].handle(msg)
                    touched.add(destination)
            for ex in self.executors:
                if ex.rank in touched or (self.rounds is not None and ex.ready):
                    ex.run(self.rounds)

    def submit(self, spec: RequestSpec) -> int:
        return self.coordinator.submit(spec)

    def run(self, specs: list[RequestSpec]) -> dict[int, dict[str, list[Any]]]:
        """Submit every request, run to completion, return each request's outputs by modality."""
        ids = [self.submit(s) for s in specs]
        self.pump()
        events = self.take_events()
        out: dict[int, dict[str, list[Any]]] = {i: {} for i in ids}
        for e in events:
            if e.kind == "output" and e.output is not None:
                out[e.request].setdefault(e.output.modality, []).append(e.output.value)
            elif e.kind == "error":
                raise RuntimeError(e.error)
        finished = {e.request for e in events if e.kind in ("done", "error", "cancelled")}
        missing = [i for i in ids if i not in finished]
        if missing:
            raise RuntimeError(f"requests {missing} did not finish: {self.stuck()}")
        return out

    def take_events(self) -> list[Event]:
        events, self.coordinator.events = self.coordinator.events, []
        return events

    def stuck(self) -> str:
        parts = []
        for ex in self.executors:
            for req, state in ex.states.items():
                for key, inst in state.instances.items():
                    ins = inst.code[inst.pc] if not inst.finished else None
                    parts.append(f"rank {ex.rank} request {req} {key} pc {inst.pc} {type(ins).__name__} "
                                 f"waiting {inst.waiting}")
        return "; ".join(parts) or "nothing running"
