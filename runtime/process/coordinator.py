"""The coordinator's side of the wire: CoordinatorCore behind sockets, on the asyncio event loop.

Why the event loop and not a thread: CoordinatorCore is plain single-threaded
state, and its callers (this API, the HTTP layer) live on the loop; keeping the
sockets there too means no locks and no cross-thread hand-off of events. The
coordinator's work per message is small (the heavy work is on the workers), so
it does not hold the loop up. Receiving is `zmq.asyncio`; sending uses plain
sockets on the same ZeroMQ context, which never block (unbounded queues).

Coalescing. What the core sends a rank during one turn of the event loop is held and leaves at
the turn's end as one `Inbound` (one encode, one send): a burst of submits reaches the worker
whole, and its first round batches all of it. The delay is one turn of the loop, never a timer.
Outside a running loop (none in this process's use) a message goes at once.

Ordering. ZeroMQ keeps each rank's messages in order, not the order across
ranks. A FlowDone or StreamDone from one rank may overtake an Output another
rank sent before it (causally earlier, over another socket); delivered at once,
the core would end the request and drop that output. So a "done" message goes
to the core only after a probe of every rank came back (probes.py): a reply
from a rank arrives after everything that rank sent earlier. That covers outputs
already sent; outputs of walks still running on another rank are covered by the
core itself, which waits for that rank's `Drained` (coordinator/core.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import zmq
import zmq.asyncio
from wgc.runtime.coordinator.core import CoordinatorCore, Event
from wgc.runtime.process import wire
from wgc.runtime.process.endpoints import Endpoints
from wgc.runtime.process.probes import Probes
from wgc.runtime.protocol.codec import Codec
from wgc.runtime.protocol.messages import (
    CancelAck,
    FlowDone,
    Health,
    HealthQuery,
    Inbound,
    Message,
    Outputs,
    Progress,
    Ready,
    Shutdown,
    StreamDone,
)

from wgc.plan.model import Plan

log = logging.getLogger("wgc.runtime")


@dataclass
class AckWait:
    waiting: set[int]  # ranks that have not acknowledged yet
    acked: set[int]
    done: asyncio.Future[None]


class Coordinator:
    def __init__(self, plan: Plan, endpoints: Endpoints, fake: bool, on_event: Callable[[Event], None],
                 on_ready: Callable[[Ready], None], on_progress: Callable[[Progress], None] | None = None) -> None:
        self.n_ranks = len(plan.ranks)
        self.on_event = on_event
        self.on_ready = on_ready  # the rank's Ready: loaded, CUDA graphs captured (its captures inside)
        self.on_progress = on_progress  # a rank's start-up lines, before its Ready
        self.codec = Codec()
        self.ctx = zmq.asyncio.Context()
        self.inbox = wire.pull_socket(self.ctx, endpoints.binds_of_coordinator())
        self.sync_ctx = zmq.Context.shadow(self.ctx.underlying)
        self.outboxes = [wire.push_socket(self.sync_ctx, ep) for ep in endpoints.ranks]
        self.down: dict[int, str] = {}
        self.core = CoordinatorCore(plan, self.send, fake)
        self.probes = Probes(lambda rank, counters: self.send(rank, HealthQuery(counters)))
        self.acks: dict[int, AckWait] = {}
        self._task: asyncio.Task[None] | None = None
        self._held: dict[int, list[Message]] = {}  # this turn's messages per rank, sent by send_held

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._receive(), name="wgc-coordinator")

    def send(self, destination: int, msg: Message) -> None:
        if destination in self.down:
            return
        held = self._held.get(destination)
        if held is not None:
            held.append(msg)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            wire.send(self.outboxes[destination], self.codec, msg)
            return
        if not self._held:
            loop.call_soon(self.send_held)
        self._held[destination] = [msg]

    def send_held(self) -> None:
        """Every rank's messages of this turn, each rank's as one message (a lone one as itself)."""
        held, self._held = self._held, {}
        for rank, items in held.items():
            if rank not in self.down:
                wire.send(self.outboxes[rank], self.codec, items[0] if len(items) == 1 else Inbound(items))

    def shutdown(self, rank: int) -> None:
        self.send_held()  # what was sent before it goes first, and Shutdown at once: the sockets close next
        if rank not in self.down:
            wire.send(self.outboxes[rank], self.codec, Shutdown())

    def alive(self) -> list[int]:
        return [r for r in range(self.n_ranks) if r not in self.down]

    # ---- inbound -------------------------------------------------------------------------

    async def _receive(self) -> None:
        while True:
            frames = await self.inbox.recv_multipart(copy=False)
            try:
                self.route(wire.decode(self.codec, frames))
            except Exception:  # a coordinator bug on one message must not stop the others
                log.exception("wgc coordinator: a message could not be handled")
            self.flush()

    def route(self, msg: Message) -> None:
        if isinstance(msg, Outputs):  # a worker's round of outputs and request ends, in the order it sent them
            for item in msg.items:
                self.route(item)  # a FlowDone in it waits for the ranks' probes as a lone one does
        elif isinstance(msg, Ready):
            self.on_ready(msg)
        elif isinstance(msg, Progress):
            if self.on_progress is not None:
                self.on_progress(msg)
        elif isinstance(msg, Health):
            self.probes.answer(msg)
        elif isinstance(msg, CancelAck):
            self._acked(msg)
        elif isinstance(msg, FlowDone | StreamDone) and self.n_ranks > 1:
            self.probes.ask_all(self.alive(), lambda _replies: self.core.on_message(msg))
        else:
            self.core.on_message(msg)

    def flush(self) -> None:
        """Hand the core's events to the API."""
        events, self.core.events = self.core.events, []
        for event in events:
            self.on_event(event)

    # ---- cancel acknowledgements -----------------------------------------------------------

    def expect_acks(self, request: int) -> AckWait:
        wait = AckWait(set(self.alive()), set(), asyncio.get_running_loop().create_future())
        self.acks[request] = wait
        self._check(request)
        return wait

    def _acked(self, msg: CancelAck) -> None:
        wait = self.acks.get(msg.request)
        if wait is not None:
            wait.waiting.discard(msg.rank)
            wait.acked.add(msg.rank)
            self._check(msg.request)

    def _check(self, request: int) -> None:
        wait = self.acks[request]
        if not wait.waiting:
            del self.acks[request]
            if not wait.done.done():
                wait.done.set_result(None)

    def cancel(self, request: int, reason: str = "cancelled") -> AckWait | None:
        """Cancel a request in flight and start collecting its CancelAcks; None when it has ended."""
        if request not in self.core.live:
            return None
        wait = self.expect_acks(request)
        self.core.cancel(request, reason)
        self.flush()
        return wait

    # ---- failures and shutdown ----------------------------------------------------------------

    def rank_down(self, rank: int, why: str) -> None:
        self.down[rank] = why
        self.core.rank_down(rank, why)
        self.probes.rank_down(rank)
        for request in list(self.acks):
            self.acks[request].waiting.discard(rank)
            self._check(request)
        self.flush()

    async def close(self) -> None:
        for wait in self.acks.values():  # no worker will answer any more
            if not wait.done.done():
                wait.done.set_result(None)
        self.acks.clear()
        self.send_held()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for sock in self.outboxes:
            sock.close(linger=0)
        self.ctx.destroy(linger=0)
