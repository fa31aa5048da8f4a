"""Tensors between hosts with `[transport] inter_host = "gloo"` or `"nccl"`: a header on ZeroMQ, the
payload on a two-rank process group per direction of each pair of ranks on different hosts.

One code path for both backends. Which pairs get an edge, on which backend and with buffers on
which device, is read from the plan (edge_plan.py); the wire format, the route of each tensor
frame and the arrival order are edge_frames.py's; the only calls that differ between Gloo and
NCCL (buffers, streams, completion) are edge_device.py's. So the Gloo path CI runs is this code
with the host device, and exercises everything but the NCCL calls themselves.

- Gloo: every tensor frame (CUDA tensors copied to host memory by the codec) goes on the group
  into fresh host buffers.
- NCCL (between two CUDA ranks; written but unverified: no GPU was available to run it): a tensor
  on the sender's device stays there (the codec's `keep_on`), goes on the group from the sender's
  edge stream after the compute stream's writes, and lands in a buffer on the receiver's device;
  CPU tensors in the same message stay ZeroMQ frames (edge_plan.py says why).

A sender sends the header and hands the payload to the direction's send thread, which holds it
until the group has sent it. The receiver's thread for that direction posts one receive per frame
only once the header is in (a Gloo or NCCL operation whose peer never posts its half waits out
the group timeout and tears the pair down), and wakes the worker through a pipe when the payload
is in; the worker delivers messages in arrival order (edge_frames.InOrder).

Every group is built at start-up, before Ready, in one global order (edge_plan.links), through the
head's store, and then used once each way with a one-byte warm-up: NCCL connects a communicator
at its first operation, so without it the first request would pay for the connection (or hang on
a peer that cannot be reached). Group timeouts are long: a backstop, never the detector.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from wgc.runtime.process.edge_device import HostSide, side_for
from wgc.runtime.process.edge_frames import Pending, frame_bytes, header, parse_header, split
from wgc.runtime.process.edge_plan import Link, Transport, links, transport_of
from wgc.runtime.process.endpoints import host_of
from wgc.runtime.process.store import store_address
from wgc.runtime.protocol.codec import Codec
from wgc.runtime.protocol.messages import Message

from wgc.plan.model import Plan

GROUP_TIMEOUT = timedelta(minutes=10)
STOP = object()  # queued to a thread to end it (tests; workers exit with their process)


def make_group(backend: str, store: Any, rank: int, address: str) -> Any:
    """A two-rank process group of one direction; `rank` 0 sends. Gloo's device is bound to the
    rank's host address (never a guessed hostname)."""
    import torch.distributed as dist

    if backend == "nccl":  # unverified here: no GPU
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = GROUP_TIMEOUT
        return dist.ProcessGroupNCCL(store, rank, 2, opts)
    opts = dist.ProcessGroupGloo._Options()
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname=address)]
    opts._timeout = GROUP_TIMEOUT
    return dist.ProcessGroupGloo(store, rank, 2, opts)


def as_tensor(frame: Any) -> Any:
    """A frame as the uint8 tensor a group sends (a host frame is wrapped, not copied)."""
    import torch

    if isinstance(frame, torch.Tensor):
        return frame
    return torch.frombuffer(frame, dtype=torch.uint8)


class Edges:
    """This rank's edges: a group, a thread and (on CUDA) a stream per direction, and a pipe the
    worker polls for payloads that came in."""

    def __init__(self, plan: Plan, rank: int, say: Callable[[str], None],
                 transport: Transport | None = None) -> None:
        import torch.distributed as dist

        self.rank = rank
        self.transport = transport or transport_of(plan, rank) or Transport("gloo", "cpu", True)
        self.codec = Codec(keep_on=self.transport.keep_on)
        self.side: HostSide = side_for(self.transport.device)
        host, port = store_address(plan)
        store = dist.TCPStore(host, port, None, False, timedelta(seconds=120))
        address = host_of(plan, rank).address
        self.out_groups: dict[int, Any] = {}  # peer → the group this rank sends to it on
        self.in_groups: dict[int, Any] = {}  # peer → the group this rank receives from it on
        t0 = time.perf_counter()
        for link in (k for k in links(plan) if rank in (k.src, k.dst)):
            self._connect(link, dist.PrefixStore(f"wgc/edge/{link.src}-{link.dst}/", store), address)
            if link.src > link.dst:  # both directions of the pair are up
                low, high = link.dst, link.src
                say(f"rank {rank}: edge {low}-{high} connected over {self.transport.backend} "
                    f"({self.transport.device} buffers) in {time.perf_counter() - t0:.1f} s")
                t0 = time.perf_counter()
        self.peers = set(self.out_groups)
        self.wake_r, self.wake_w = os.pipe()
        self._sends = {p: self._start(send_loop, self.out_groups[p], f"wgc-edge-to-{p}") for p in self.peers}
        self._recvs = {p: self._start(recv_loop, self.in_groups[p], f"wgc-edge-from-{p}") for p in self.peers}

    def _connect(self, link: Link, store: Any, address: str) -> None:
        """Build one direction's group and send one byte on it, so its connection exists now."""
        sender = link.src == self.rank
        pg = make_group(link.backend, store, 0 if sender else 1, address)
        stream = self.side.new_stream()
        with self.side.on(stream):
            probe = self.side.buffer(1)
            (pg.send([probe], 1, 0) if sender else pg.recv([probe], 0, 0)).wait()
            self.side.finish(stream)
        if sender:
            self.out_groups[link.dst] = pg
        else:
            self.in_groups[link.src] = pg

    def _start(self, loop: Callable[..., None], pg: Any, name: str) -> queue.Queue[Any]:
        jobs: queue.Queue[Any] = queue.Queue()
        threading.Thread(target=loop, args=(self.side, pg, jobs, self.wake_w), daemon=True, name=name).start()
        return jobs

    def post(self, peer: int, sock: Any, msg: Message) -> None:
        """Send `msg` to `peer`: as one ZeroMQ message on `sock` when no frame rides the group, else as
        a header on `sock` with its payload handed to the direction's send thread."""
        frames = self.codec.encode(msg)
        route, inline, payload = split(frames, self.transport.host_frames)
        if not payload:
            sock.send_multipart(frames, copy=False)
            return
        sock.send_multipart(header(self.rank, frames[0], route, inline), copy=False)
        self.send(peer, payload)

    def send(self, peer: int, payload: list[Any]) -> None:
        """Hand frames to the send thread; they stay referenced (alive) until the group has sent them."""
        self._sends[peer].put((payload, self.side.mark()))

    def expect(self, frames: list[Any]) -> Pending:
        """A header came in: the message it announces, its payload's receives posted."""
        slot = parse_header(frames)
        self._recvs[slot.source].put(slot)
        return slot

    def decode(self, slot: Pending) -> Message:
        return self.codec.decode(slot.frames())

    def stop(self) -> None:
        for jobs in (*self._sends.values(), *self._recvs.values()):
            jobs.put(STOP)


def send_loop(side: HostSide, pg: Any, jobs: queue.Queue[Any], wake: int) -> None:
    """One direction's sender: each job's frames in order, each held until the group has sent it."""
    stream = side.new_stream()
    while (job := jobs.get()) is not STOP:
        send_job(side, pg, stream, *job)
        del job  # the last hold on the payload: not kept while this thread waits for the next job


def send_job(side: HostSide, pg: Any, stream: Any, payload: list[Any], mark: Any) -> None:
    try:
        with side.on(stream):
            side.after(mark)  # on CUDA: the compute stream has written the bytes
            for frame in payload:
                if frame_bytes(frame):
                    pg.send([as_tensor(frame)], 1, 0).wait()
            side.finish(stream)  # on CUDA: the bytes have left; only now may the tensors go
    except Exception:  # noqa: BLE001 - the peer is gone: its host's detector reports it
        pass


def recv_loop(side: HostSide, pg: Any, jobs: queue.Queue[Any], wake: int) -> None:
    """One direction's receiver: a header's frames into fresh buffers on the receiver's device, then
    a byte on `wake` so the worker looks at what they held back."""
    stream = side.new_stream()
    while (slot := jobs.get()) is not STOP:
        try:
            with side.on(stream):
                bufs = [side.buffer(n) for n in slot.sizes]
                for buf in bufs:
                    if buf.numel():
                        pg.recv([buf], 0, 0).wait()
                side.finish(stream)
                side.hand_over(bufs)
            slot.fill(bufs)
        except Exception as err:  # noqa: BLE001 - the peer is gone: the message fails, the detector says why
            slot.error = f"{type(err).__name__}: {err}"
        os.write(wake, b"x")
