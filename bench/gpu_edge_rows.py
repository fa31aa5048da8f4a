"""The runtime's own tensor edges (runtime/process/tensor_edges.py) between bench/gpu_multinode.py's
two loopback hosts, driven as a worker drives them (`Edges.post` to send; headers to `expect`, then
`InOrder` on receipt): the rows NCCL (unverified until a GPU session runs bench/gpu_check.sh) and
Gloo (CI, tests/runtime/test_tensor_path.py) both print.

1. A round trip per message, the edge and ZeroMQ frames through host memory alternating: the
   receiver decodes each message, checks its values and devices (a message that came as ZeroMQ
   frames is moved to the device first, as a component would), and answers with one byte.
2. Both ranks send each other BOTH_WAYS large messages at once and then take theirs: payloads
   beyond NCCL's buffers both ways, which one group for both directions could deadlock on
   (edge_plan.py), all checked.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

ADDRESSES = ("127.0.0.2", "127.0.0.3")
BOTH_WAYS = 2
BIG = (2048, 1024)  # 8 MiB of f32


def _message(i: int, shape: tuple[int, ...], device: str, kind: str) -> Any:
    import torch
    from wgc.runtime.protocol.messages import Data

    return Data(i, str(shape), kind, {"z": torch.full(shape, float(i), device=device), "step": torch.tensor(i)})


def _check(msg: Any, device: str) -> bool:
    """This message's own values, the latent on `device`, the counter on the CPU."""
    z, step = msg.value["z"], msg.value["step"]
    if msg.tag == "zmq":
        z = z.to(device)
    return bool(str(z.device) == device and step.device.type == "cpu" and int(step) == msg.request
                and (z == float(msg.request)).all())


def runtime_rows(backend: str, rank: int, n: int, sizes: list[tuple[int, ...]],
                 port: int) -> tuple[list[tuple[tuple[int, ...], float, float]], float, int]:
    """(shape, edge round trip us, ZeroMQ round trip us) per size, medians; the both-ways exchange's
    time in us (rank 0's view); and how many messages arrived wrong on this rank. The plan's store
    is at `port`, rank r's socket at `port` + 10 + r."""
    import zmq
    from wgc.runtime.process import wire
    from wgc.runtime.process.store import HeadStore
    from wgc.runtime.process.tensor_edges import Edges

    from tests.runtime.loopback_plans import plan_of

    device = "cuda:0" if backend == "nccl" else "cpu"  # each "host" has its one GPU at index 0
    plan = plan_of([[device], [device]], inter=backend, port=port)
    store = HeadStore(plan) if rank == 0 else None
    edges = Edges(plan, rank, lambda line: print(line, file=sys.stderr))
    ctx = zmq.Context()
    pull = wire.pull_socket(ctx, f"tcp://{ADDRESSES[rank]}:{port + 10 + rank}")
    push = wire.push_socket(ctx, f"tcp://{ADDRESSES[rank]}:0;{ADDRESSES[1 - rank]}:{port + 11 - rank}")
    rows, bad, inbox = [], 0, Inbox(edges, pull)
    try:
        for shape in sizes:
            if rank == 1:
                bad += _answer(inbox, push, 2 * (n + 10), device)
            else:
                edge, plain, wrong = _round_trips(edges, pull, push, n, shape, device)
                rows.append((shape, edge, plain))
                bad += wrong
        both_us, wrong = _both_ways(edges, inbox, push, rank, device)
        bad += wrong
    finally:
        ctx.destroy(linger=0)
        del store
    return rows, both_us, bad


def _round_trips(edges: Any, pull: Any, push: Any, n: int, shape: tuple[int, ...],
                 device: str) -> tuple[float, float, int]:
    from wgc.runtime.process import wire
    from wgc.runtime.protocol.codec import Codec

    times: dict[str, list[float]] = {"edge": [], "zmq": []}
    bad = 0
    for i in range(n + 10):
        for kind in ("edge", "zmq"):  # interleaved: the baseline sees the same load
            msg = _message(i, shape, device, kind)
            t0 = time.perf_counter()
            if kind == "edge":
                edges.post(1, push, msg)
            else:
                wire.send(push, Codec(), msg)
            answer = pull.recv()
            if i >= 10:
                times[kind].append(time.perf_counter() - t0)
            bad += int(answer != b"ok")
    return 1e6 * statistics.median(times["edge"]), 1e6 * statistics.median(times["zmq"]), bad


class Inbox:
    """A worker's receive path: headers to `expect`, other messages decoded, all in arrival order;
    `take` returns exactly the count asked, keeping any later arrivals for the next call."""

    def __init__(self, edges: Any, pull: Any) -> None:
        from wgc.runtime.process.edge_frames import InOrder
        from wgc.runtime.protocol.codec import Codec

        self.edges, self.pull, self.order, self.plain = edges, pull, InOrder(), Codec()
        self.came: list[Any] = []

    def take(self, count: int) -> list[Any]:
        import zmq
        from wgc.runtime.process.edge_frames import HEADER, Pending
        from wgc.runtime.process.wire import decode

        while len(self.came) < count:
            ready = zmq.select([self.pull, self.edges.wake_r], [], [], 60)[0]
            if not ready:
                raise TimeoutError(f"rank {self.edges.rank}: {len(self.came)} of {count} messages came")
            if self.edges.wake_r in ready:
                os.read(self.edges.wake_r, 4096)
            while True:
                try:
                    frames = self.pull.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                self.order.items.append(self.edges.expect(frames) if frames[0].bytes == HEADER
                                        else decode(self.plain, frames))
            failed = [m.error for m in self.order.items if isinstance(m, Pending) and m.error]
            if failed:  # a worker drops it (its host's detector reports why); here it is the result
                raise RuntimeError(f"rank {self.edges.rank}: a payload failed: {failed[0]}")
            self.came += self.order.released(self.edges.decode)
        out, self.came = self.came[:count], self.came[count:]
        return out


def _answer(inbox: Inbox, push: Any, count: int, device: str) -> int:
    """The receiving rank of the round trips: one byte back per message; how many arrived wrong."""
    bad = 0
    for _ in range(count):
        (msg,) = inbox.take(1)
        ok = _check(msg, device)
        bad += int(not ok)
        push.send(b"ok" if ok else b"bad")
    return bad


def _both_ways(edges: Any, inbox: Inbox, push: Any, rank: int, device: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    for i in range(BOTH_WAYS):
        edges.post(1 - rank, push, _message(i, BIG, device, "edge"))
    got = inbox.take(BOTH_WAYS)
    took = time.perf_counter() - t0
    bad = sum(not _check(m, device) for m in got) + int([m.request for m in got] != list(range(BOTH_WAYS)))
    _goodbye(inbox, push)
    return 1e6 * took, bad


def _goodbye(inbox: Inbox, push: Any) -> None:
    """Both ranks say they have every message before either exits: a rank that exits while its send
    thread still writes a payload tears the pair down under the other's receive."""
    from wgc.runtime.process import wire
    from wgc.runtime.protocol.codec import Codec
    from wgc.runtime.protocol.messages import Data

    wire.send(push, Codec(), Data(-1, "", "bye", None))
    (bye,) = inbox.take(1)
    if bye.tag != "bye":
        raise RuntimeError(f"rank {inbox.edges.rank}: {bye.tag!r} came where the peer's goodbye was due")
