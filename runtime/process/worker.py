"""One rank as a process: its executor behind a PULL socket, PUSH sockets to every peer.

Start-up (runtime/worker/startup.py): the sockets first, so that every start-up line (loading a
component, capturing a CUDA graph) reaches the coordinator as a Progress message as it happens (and
this process's stderr through the `wgc.runtime.startup` logger); then Ready, carrying the capture
results, once everything is loaded and captured.

The loop: wait for messages (or for the parent to go away), take every message
already waiting, then let the executor run. Taking all waiting messages
before running batches requests that arrive together (continuous batching).
"""

from __future__ import annotations

import os
from collections import deque

import zmq
from wgc.runtime.components.base import Component, load_class
from wgc.runtime.components.fake import FakeComponent
from wgc.runtime.process import wire
from wgc.runtime.process.edge_frames import HEADER, InOrder
from wgc.runtime.process.edge_plan import uses_edges
from wgc.runtime.process.endpoints import Endpoints
from wgc.runtime.process.gate import InitGate
from wgc.runtime.process.heap import freeze_startup_heap
from wgc.runtime.process.out_batch import OutBatch
from wgc.runtime.process.tensor_edges import Edges
from wgc.runtime.protocol.codec import Codec
from wgc.runtime.protocol.messages import Inbound, Message, Progress, Ready, Shutdown
from wgc.runtime.worker.executor import COORDINATOR, Executor, Options
from wgc.runtime.worker.startup import Make, Step, start_rank
from wgc.runtime.worker.tp_group import build_groups

from wgc.plan.model import ComponentSpec, Plan
from wgc.settings import cpu_threads

_BATCH = 512  # messages taken per round at most, so a flood of messages cannot starve the executor


def component_maker(plan: Plan, rank: int, fake: bool) -> Make:
    """How this rank constructs a component: a fake (no weights), or the real class.

    A real class loads its weights from where its model family says (a WGC_..._DIR knob) and,
    with none given, runs its tiny preset on random weights and logs that in one line.
    """
    device = plan.ranks[rank].device
    if device == "cpu" and not fake:
        share_cpu(plan, rank)

    def make(spec: ComponentSpec) -> Component:
        return FakeComponent(spec, rank, device) if fake else load_class(spec.cls)(spec, rank, device)

    return make


def share_cpu(plan: Plan, rank: int) -> None:
    """A CPU rank computes with its share of the host's cores (settings.cpu_threads): torch's default,
    every core in every process, oversubscribes a host that runs several ranks (and small models lose
    more to threads waiting on each other than they gain)."""
    host = plan.ranks[rank].host
    threads = cpu_threads(sum(1 for r in plan.ranks if r.device == "cpu" and r.host == host))
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


class Worker:
    def __init__(self, plan: Plan, rank: int, endpoints: Endpoints, fake: bool, parent_fd: int) -> None:
        self.rank = rank
        self.parent_fd = parent_fd  # a pipe from the parent: end of file means the parent is gone
        self.codec = Codec()
        self.local: deque[Message] = deque()  # messages to this rank itself
        self.edges: Edges | None = None  # tensors to other hosts' ranks over Gloo or NCCL (tensor_edges.py)
        self.in_order = InOrder()  # arrival order, held behind a payload still on its way
        self.out = OutBatch(rank, self._send)  # a round's Outputs leave as one message
        self.ctx = zmq.Context()
        try:
            self.inbox = wire.pull_socket(self.ctx, endpoints.binds_of_rank(rank))
            self.outboxes = {r: wire.push_socket(self.ctx, ep) for r, ep in enumerate(endpoints.ranks) if r != rank}
            self.outboxes[COORDINATOR] = wire.push_socket(self.ctx, endpoints.coordinator)
            if not fake:  # every communicator before the components, and before Ready (tp_group.py)
                build_groups(plan, rank, self.progress)
            if uses_edges(plan) and not fake:
                self.edges = Edges(plan, rank, self.progress)
            started = start_rank(plan, rank, component_maker(plan, rank, fake), self.progress)
        except BaseException:
            self.ctx.destroy(linger=0)
            raise
        self.captures = started.captures
        self.executor = Executor(plan, rank, started.components, self.out.send, Options(fake_inputs=fake),
                                 flush=self.out.flush)
        self.gate = InitGate(self.executor)

    def progress(self, line: str, step: Step | None = None) -> None:
        """To the coordinator, which shows it (`wgc run`: plain lines, or bars on a terminal)."""
        phase, done, total = (step.phase, step.done, step.total) if step is not None else ("", 0, 0)
        self.send(COORDINATOR, Progress(self.rank, line, phase, done, total))

    def send(self, destination: int, msg: Message) -> None:
        self.out.send(destination, msg)

    def _send(self, destination: int, msg: Message) -> None:
        if destination == self.rank:
            self.local.append(msg)
        elif self.edges is not None and destination in self.edges.peers:
            self.edges.post(destination, self.outboxes[destination], msg)  # a header here, the payload on the edge
        else:
            wire.send(self.outboxes[destination], self.codec, msg)

    def serve(self) -> str:
        """Report ready (everything loaded and captured), then run until Shutdown or until the parent
        goes away; returns which."""
        freeze_startup_heap()  # everything is loaded and captured: its objects stay for the process's life
        self.send(COORDINATOR, Ready(self.rank, os.getpid(), self.captures))
        poller = zmq.Poller()
        poller.register(self.inbox, zmq.POLLIN)
        poller.register(self.parent_fd, zmq.POLLIN)
        if self.edges is not None:
            poller.register(self.edges.wake_r, zmq.POLLIN)
        while True:
            events = dict(poller.poll(0 if self.local or self.executor.ready else None))
            if self.parent_fd in events and not os.read(self.parent_fd, 4096):
                return "parent gone"
            if self.edges is not None and self.edges.wake_r in events:
                os.read(self.edges.wake_r, 4096)  # payloads came in: what they held back goes now
            if not self._take_waiting(self.inbox in events):
                return "shutdown"
            self.executor.run(max_rounds=1)  # messages (cancels, probes, new requests) are read between rounds
            self.out.flush()

    def _take_waiting(self, inbox: bool = True) -> bool:
        """Deliver every message already here; False on Shutdown. `inbox`: the poll saw messages on the
        socket (a decode round mostly has none: a receive that finds nothing raises, ~8 us a round)."""
        while self.local:
            self.gate.deliver(self.local.popleft())
        for _ in range(_BATCH if inbox else 0):
            try:
                frames = self.inbox.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            if self.edges is not None and frames[0].bytes == HEADER:
                self.in_order.items.append(self.edges.expect(frames))  # its payload's receives posted
                continue
            msg = wire.decode(self.codec, frames)
            for item in msg.items if isinstance(msg, Inbound) else (msg,):  # a turn of the coordinator's sends
                if isinstance(item, Shutdown):
                    return False
                if self.in_order.items:
                    self.in_order.items.append(item)
                else:
                    self.gate.deliver(item)
        if self.edges is not None:
            for item in self.in_order.released(self.edges.decode):
                self.gate.deliver(item)
        return True

    def close(self) -> None:
        self.ctx.destroy(linger=0)
