"""Which ranks get a tensor edge, on which backend, with payload buffers on which device: read from
the plan alone, the same on every rank (so every rank builds the same groups in the same order).

An edge joins two ranks on different hosts of a plan whose `[transport] inter_host` is "gloo" or
"nccl". Each direction of a pair is its own two-rank process group (the sender is group rank 0):
a group carrying one direction only never has a send queued behind a send the other way. On one
NCCL communicator two ranks that both send first would each wait for the other's receive (NCCL
orders a communicator's operations on one stream), so a single group per pair could deadlock
under traffic both ways; Gloo takes the same layout, so the CPU path CI runs is the same code.

- "gloo": every tensor frame rides the group, from host memory into host buffers (a CUDA tensor
  is copied to the host by the codec first, as for ZeroMQ).
- "nccl": only between two CUDA ranks. A tensor on the sender's own device rides the group and
  lands in a buffer on the receiver's device (`cuda:N`, N its index on its host); a CPU tensor in
  the same message stays a ZeroMQ frame: it is small (token ids, scalars) where GPUs talk, and a
  second (Gloo) group per pair would cost another rendezvous and more ephemeral ports for it. A
  pair with a CPU rank gets no edge: its tensors go as ZeroMQ frames, as with "zmq".
"""

from __future__ import annotations

from dataclasses import dataclass

from wgc.runtime.process.endpoints import host_index, multi_host

from wgc.plan.model import Plan

BACKENDS = ("gloo", "nccl")


@dataclass(frozen=True)
class Link:
    """One direction of an edge: `src` sends, `dst` receives, over `backend`."""

    src: int
    dst: int
    backend: str


@dataclass(frozen=True)
class Transport:
    """How one rank's edges carry a payload: the group's backend, where buffers are allocated, and
    whether frames in host memory ride the group too (Gloo) or stay on ZeroMQ (NCCL)."""

    backend: str
    device: str
    host_frames: bool

    @property
    def keep_on(self) -> str | None:
        """The device whose tensors the codec leaves in place as frames (runtime/protocol/codec.py)."""
        return None if self.host_frames else self.device


def edge_backend(plan: Plan, a: int, b: int) -> str | None:
    """The backend of the edge between ranks `a` and `b`; None when they have none."""
    inter = plan.transport.inter_host if plan.transport is not None else ""
    if inter not in BACKENDS or not multi_host(plan) or host_index(plan, a) == host_index(plan, b):
        return None
    if inter == "nccl" and not all(plan.ranks[r].device.startswith("cuda") for r in (a, b)):
        return None
    return inter


def links(plan: Plan) -> list[Link]:
    """Every direction of every edge, in the one order every rank builds them in: pairs sorted, each
    pair's low-to-high direction first. Building in per-rank orders could wait in a cycle; in one
    global order the first unbuilt link always has both its ranks at it."""
    n = len(plan.ranks)
    out = []
    for a in range(n):
        for b in range(a + 1, n):
            backend = edge_backend(plan, a, b)
            if backend is not None:
                out += [Link(a, b, backend), Link(b, a, backend)]
    return out


def uses_edges(plan: Plan) -> bool:
    return bool(links(plan))


def transport_of(plan: Plan, rank: int) -> Transport | None:
    """How `rank`'s edges carry payloads (one backend per plan); None when it has no edge."""
    mine = [link for link in links(plan) if rank in (link.src, link.dst)]
    if not mine:
        return None
    if mine[0].backend == "nccl":
        return Transport("nccl", plan.ranks[rank].device, host_frames=False)
    return Transport("gloo", "cpu", host_frames=True)
