"""The coordinator's logic without I/O: admit requests, start their flows, collect outputs, know when
each request is complete. Walks hand over to each other on the workers; the coordinator only hears
about outputs, finished flows and finished streams.

A request is complete when every flow it started is done, every stream that fires walks is done, and
every rank that a FlowDone or StreamDone names in `drains` has reported `Drained`: those ranks may
still be running (and emitting in) walks of that flow when its end rank finishes, and their outputs
reach us over their own sockets. A Drained may arrive before the FlowDone that names it (two senders).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wgc.runtime.coordinator.request import Accepts, RequestError, RequestSpec, resolve_params
from wgc.runtime.protocol.messages import (
    COORDINATOR,
    Cancel,
    CancelAck,
    Drained,
    Failed,
    FlowDone,
    Health,
    Message,
    Output,
    Outputs,
    Progress,
    Ready,
    RequestInit,
    StartWalk,
    StreamDone,
    ToCoordinator,
    check_handlers,
)
from wgc.runtime.worker.context import RankPlan
from wgc.runtime.worker.flowstep import first_step, on_ranks
from wgc.runtime.worker.request_env import RequestEnv, const_table

from wgc.plan.model import Plan
from wgc.semantics.flows import FlowError
from wgc.semantics.mock import mock_input
from wgc.semantics.python_exprs import evaluator_for

Send = Callable[[int, Message], None]


@dataclass
class Event:
    """What the API hands to a request's caller: an output, or the end (done / error / cancelled)."""

    request: int
    kind: str  # "output", "done", "error", "cancelled"
    output: Output | None = None
    error: str = ""
    cut: list[str] = field(default_factory=list)  # "done": walks whose dynamic loop stopped at its `max` bound


@dataclass
class Tracked:
    init: RequestInit
    flows: set[str]
    streams: set[str]
    failed: bool = False
    cut: list[str] = field(default_factory=list)  # from the FlowDones so far
    cancel_acks: set[int] = field(default_factory=set)
    # Drained reports still due, per (flow, stream, rank): +1 for each rank a FlowDone or StreamDone names,
    # -1 for each Drained (which may come first); entries at 0 are removed.
    drains: dict[tuple[str, str, int], int] = field(default_factory=dict)


class CoordinatorCore:
    def __init__(self, plan: Plan, send: Send, fake_inputs: bool = False) -> None:
        self.plan = plan
        self.send = send
        self.fake = fake_inputs
        self.consts = const_table(plan, fake_inputs)
        tables = RankPlan.build(plan, COORDINATOR)  # the plan-wide tables the workers use too
        self.walks = tables.walks
        self.tables = tables.flows
        self.inputs = tables.inputs
        self.fed_by = tables.fed_by_flow
        self.on_walk_streams = {s.name for s in plan.streams if s.consumer_walk}
        self.accepts = Accepts.of(plan)
        self.live: dict[int, Tracked] = {}
        self.events: list[Event] = []
        self._ids = itertools.count(1)
        self.coordinator_messages = 0  # messages received from workers (tests count round trips)

    def submit(self, spec: RequestSpec) -> int:
        params = resolve_params(self.plan.params, spec.params)
        outputs = self.accepts.outputs(spec)
        self.accepts.check(spec)
        request = next(self._ids)
        init = RequestInit(request, params, spec.task, list(spec.parts), dict(spec.inputs),
                           list(spec.input_modalities), outputs, spec.think)
        starts = []
        evaluate = evaluator_for(self.fake)
        for name, table in self.tables.items():
            cond = lambda e, kind, _i=init: evaluate(e, RequestEnv(self.consts, _i, part=kind))  # noqa: E731
            if not table.starts(cond):
                continue
            try:
                step = first_step(table, init, cond, lambda w: list(self.walks[w].inputs), self._missing)
            except FlowError as err:
                raise RequestError(str(err)) from None
            starts.append((name, step))
        if not starts:
            raise RequestError("no flow of this model serves the request (check its task and output modalities)")
        streams = {s for name, _ in starts for s in self.fed_by.get(name, []) if s in self.on_walk_streams}
        self.live[request] = Tracked(init, {name for name, _ in starts}, streams)
        for rank in range(len(self.plan.ranks)):
            self.send(rank, init)
        for name, step in starts:
            if step is None:
                self.live[request].flows.discard(name)
                continue
            state, prior = on_ranks(step, self.walks[step.walk].ranks)
            for r in self.walks[step.walk].ranks:
                needed = self.inputs.get((r, step.walk), [])
                self.send(r, StartWalk(request, step.key, step.walk,
                                       {a: v for a, v in step.inputs.items() if a in needed}, state, prior[r]))
        self._maybe_done(request)
        return request

    def _missing(self, name: str) -> Any:
        if self.fake:
            return mock_input(name)
        raise RequestError(f"the request has no input `{name}`")

    def cancel(self, request: int, reason: str = "cancelled") -> None:
        tracked = self.live.get(request)
        if tracked is None:
            return
        for rank in range(len(self.plan.ranks)):
            self.send(rank, Cancel(request, reason))
        self.live.pop(request)
        self.events.append(Event(request, "cancelled" if reason == "cancelled" else "error", error=reason))

    def on_message(self, msg: Message) -> None:
        """A worker's message about a request; one about a request no longer live (cancelled, failed,
        done) is dropped. The process layer answers Ready, Progress and Health itself (ELSEWHERE)."""
        self.coordinator_messages += 1
        handler = HANDLERS.get(type(msg))
        if handler is None:
            raise ValueError(f"the coordinator core cannot handle {type(msg).__name__}")
        tracked = self.live.get(msg.request)
        if tracked is not None:
            handler(self, msg, tracked)

    def _on_output(self, msg: Output, tracked: Tracked) -> None:
        self.events.append(Event(msg.request, "output", output=msg))

    def _on_flow_done(self, msg: FlowDone, tracked: Tracked) -> None:
        tracked.flows.discard(msg.flow)
        tracked.cut.extend(w for w in msg.cut if w not in tracked.cut)
        for rank in msg.drains:
            _count(tracked.drains, (msg.flow, "", rank), 1)
        self._maybe_done(msg.request)

    def _on_stream_done(self, msg: StreamDone, tracked: Tracked) -> None:
        tracked.streams.discard(msg.stream)
        for rank in msg.drains:
            _count(tracked.drains, ("", msg.stream, rank), 1)
        self._maybe_done(msg.request)

    def _on_drained(self, msg: Drained, tracked: Tracked) -> None:
        _count(tracked.drains, (msg.flow, msg.stream, msg.rank), -1)
        self._maybe_done(msg.request)

    def _on_failed(self, msg: Failed, tracked: Tracked) -> None:
        self.cancel(msg.request, f"failed: {msg.error}")

    def _on_cancel_ack(self, msg: CancelAck, tracked: Tracked) -> None:
        pass  # the process layer counts acknowledgements (runtime/process/coordinator.py); nothing here

    def _maybe_done(self, request: int) -> None:
        tracked = self.live.get(request)
        if tracked is not None and not tracked.flows and not tracked.streams and not tracked.drains:
            for rank in range(len(self.plan.ranks)):
                self.send(rank, Cancel(request, "done"))
            self.live.pop(request)
            self.events.append(Event(request, "done", cut=list(tracked.cut)))

    def rank_down(self, rank: int, why: str) -> None:
        """A worker died: every request in flight fails with a clear error."""
        for request in list(self.live):
            self.cancel(request, f"rank {rank} is down: {why}")


def _count(counts: dict[tuple[str, str, int], int], key: tuple[str, str, int], n: int) -> None:
    left = counts.get(key, 0) + n
    if left:
        counts[key] = left
    else:
        del counts[key]


# The core's handler for every message a worker sends it, by type: a renamed message keeps its handler, and a
# message type without one fails this import. The process coordinator (runtime/process/coordinator.py) answers
# these itself and never hands them to the core (an Outputs it unpacks into its Outputs):
ELSEWHERE = {Health, Progress, Ready, Outputs}
HANDLERS: dict[type, Callable[[CoordinatorCore, Any, Tracked], None]] = {
    Output: CoordinatorCore._on_output,
    FlowDone: CoordinatorCore._on_flow_done,
    StreamDone: CoordinatorCore._on_stream_done,
    Drained: CoordinatorCore._on_drained,
    Failed: CoordinatorCore._on_failed,
    CancelAck: CoordinatorCore._on_cancel_ack,
}
check_handlers(HANDLERS, ToCoordinator, ELSEWHERE, "the coordinator core (runtime/coordinator/core.py)")
