"""Tensors between hosts with `[transport] inter_host = "gloo"`: a header on ZeroMQ, the payload on a
two-rank process group per pair of ranks on different hosts (what NCCL would carry between GPUs;
Gloo is its CPU stand-in, so CI runs the same path).

The codec already splits a message into a msgpack head and one raw frame per tensor. A sender sends
the head on ZeroMQ behind a marker (`HEADER`, its rank, the frames' sizes) and hands the tensor
frames to its edge's send thread, which keeps them alive until Gloo has sent them. The receiver's
edge thread posts a recv per frame only once the header has arrived (a Gloo op whose peer never
posts its half would wait out the group timeout and close the pair), into fresh buffers; the
message is decoded from the head and those buffers when they are in.

Order: a worker delivers its messages in arrival order, so everything that arrives behind a header
waits until that header's payload is in (`InOrder`): ZeroMQ's per-sender order, which the protocol
relies on, holds whatever the payload's route.

Groups are built at start-up in one global order (sorted pairs: building them in per-rank orders
could wait in a cycle), before Ready, through the head's store. `inter_host = "nccl"` and `"zmq"`
keep tensors as ZeroMQ frames for now (the NCCL payload path needs device buffers: not written).
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from wgc.runtime.process.endpoints import host_index, multi_host
from wgc.runtime.process.store import store_address

from wgc.plan.model import Plan

HEADER = b"wgc-tensor-header"
GROUP_TIMEOUT = timedelta(minutes=10)


def uses_edges(plan: Plan) -> bool:
    return multi_host(plan) and plan.transport is not None and plan.transport.inter_host == "gloo"


def edge_pairs(plan: Plan) -> list[tuple[int, int]]:
    """Every pair of ranks on different hosts, sorted: the order every rank builds its groups in."""
    n = len(plan.ranks)
    return [(a, b) for a in range(n) for b in range(a + 1, n) if host_index(plan, a) != host_index(plan, b)]


@dataclass
class Pending:
    """A message whose tensor frames are still on their way; `frames` once they are in."""

    head: bytes
    frames: list[Any] | None = None
    error: str = ""


@dataclass
class InOrder:
    """Messages in arrival order; a Pending one holds back every message behind it."""

    items: deque[Any] = field(default_factory=deque)

    def ready(self) -> list[Any]:
        out = []
        while self.items and not (isinstance(self.items[0], Pending) and self.items[0].frames is None
                                  and not self.items[0].error):
            out.append(self.items.popleft())
        return out


class Edges:
    """This rank's edge groups, a send and a receive thread per peer, and a pipe the worker polls."""

    def __init__(self, plan: Plan, rank: int, address: str, say: Callable[[str], None]) -> None:
        import torch.distributed as dist

        host, port = store_address(plan)
        store = dist.TCPStore(host, port, None, False, timedelta(seconds=120))
        self.rank = rank
        self.groups: dict[int, Any] = {}
        for a, b in edge_pairs(plan):
            if rank not in (a, b):
                continue
            opts = dist.ProcessGroupGloo._Options()
            opts._devices = [dist.ProcessGroupGloo.create_device(hostname=address)]
            opts._timeout = GROUP_TIMEOUT
            peer = b if rank == a else a
            self.groups[peer] = dist.ProcessGroupGloo(dist.PrefixStore(f"wgc/edge/{a}-{b}/", store),
                                                      0 if rank == a else 1, 2, opts)
            say(f"rank {rank}: edge {a}-{b} connected over gloo")
        self.wake_r, self.wake_w = os.pipe()
        self._sends: dict[int, queue.Queue[Any]] = {}
        self._recvs: dict[int, queue.Queue[Any]] = {}
        for peer in self.groups:
            self._sends[peer], self._recvs[peer] = queue.Queue(), queue.Queue()
            for target, q in ((self._send_loop, self._sends[peer]), (self._recv_loop, self._recvs[peer])):
                threading.Thread(target=target, args=(peer, q), daemon=True, name=f"wgc-edge-{peer}").start()

    def peer_index(self, peer: int) -> int:
        return 1 if self.rank < peer else 0

    def send(self, peer: int, frames: list[Any]) -> None:
        self._sends[peer].put(frames)

    def recv(self, peer: int, sizes: list[int], slot: Pending) -> None:
        self._recvs[peer].put((sizes, slot))

    def _send_loop(self, peer: int, jobs: queue.Queue[Any]) -> None:
        import torch

        pg = self.groups[peer]
        while True:
            for frame in jobs.get():
                if len(frame):
                    pg.send([torch.frombuffer(frame, dtype=torch.uint8)], self.peer_index(peer), 0).wait()

    def _recv_loop(self, peer: int, jobs: queue.Queue[Any]) -> None:
        import torch

        pg = self.groups[peer]
        while True:
            sizes, slot = jobs.get()
            try:
                bufs = [torch.empty(n, dtype=torch.uint8) for n in sizes]
                for buf in bufs:
                    if buf.numel():
                        pg.recv([buf], self.peer_index(peer), 0).wait()
                slot.frames = [memoryview(b.numpy()) for b in bufs]
            except Exception as err:  # noqa: BLE001 - the peer is gone: the message fails, the detector says why
                slot.error = f"{type(err).__name__}: {err}"
            os.write(self.wake_w, b"x")
