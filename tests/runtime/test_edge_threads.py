"""The tensor edges' threads and groups (runtime/process/tensor_edges.py), in one process: the send
thread holds a payload until the group has sent it and not after, the receive thread fills fresh
buffers from the edge's device half and hands them over before the message is released, and two
ranks' `Edges` over real Gloo groups (on 127.0.0.2 and 127.0.0.3) carry messages both ways in
order, with Gloo's routing and with NCCL's (device frames on the group, the rest on ZeroMQ)."""

from __future__ import annotations

import gc
import os
import queue
import select
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import zmq
from wgc.runtime.process import tensor_edges
from wgc.runtime.process.edge_device import HostSide
from wgc.runtime.process.edge_frames import HEADER, InOrder, Pending
from wgc.runtime.process.edge_plan import Transport
from wgc.runtime.process.store import HeadStore
from wgc.runtime.process.tensor_edges import STOP, Edges, recv_loop, send_loop
from wgc.runtime.protocol.codec import Codec
from wgc.runtime.protocol.messages import Data

from tests.runtime.hosts import free_base_port
from tests.runtime.loopback_plans import plan_of

WAIT = 20.0  # seconds: every wait here is bounded


class Work:
    def __init__(self, done: threading.Event) -> None:
        self.done = done

    def wait(self) -> bool:
        assert self.done.wait(WAIT)
        return True


class FakeGroup:
    """A group whose sends complete when the test says so; receives fill with 1, 2, 3, ..."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.release = threading.Event()
        self.called = threading.Event()
        self.fail = False

    def send(self, tensors: list[Any], dst: int, tag: int) -> Work:
        self.sent.append(tensors[0].numpy().tobytes())
        self.called.set()
        return Work(self.release)

    def recv(self, tensors: list[Any], src: int, tag: int) -> Work:
        if self.fail:
            raise RuntimeError("Connection closed by peer")
        tensors[0].fill_(len(self.sent) + 1)
        self.sent.append(b"recv")
        done = threading.Event()
        done.set()
        return Work(done)


class Watched(queue.Queue[Any]):
    """A job queue that says each time its thread comes back for the next job."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0
        self.back = threading.Condition()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        with self.back:
            self.gets += 1
            self.back.notify_all()
        return super().get(block, timeout)

    def wait_gets(self, n: int) -> None:
        with self.back:
            assert self.back.wait_for(lambda: self.gets >= n, WAIT)


class RecordingSide(HostSide):
    def __init__(self) -> None:
        self.log: list[str] = []
        self.slot: Pending | None = None

    def buffer(self, n: int) -> Any:
        self.log.append(f"buffer {n}")
        return super().buffer(n)

    def finish(self, stream: Any) -> None:
        self.log.append("finish")

    def hand_over(self, bufs: list[Any]) -> None:
        self.log.append(f"hand over {len(bufs)}, released: {self.slot is not None and not self.slot.waiting}")


def test_a_payload_stays_alive_until_its_send_completes_and_no_longer() -> None:
    pg, jobs = FakeGroup(), Watched()
    threading.Thread(target=send_loop, args=(HostSide(), pg, jobs, -1), daemon=True).start()
    frame = torch.arange(256, dtype=torch.float32).view(torch.uint8)  # as the codec hands it over
    alive = weakref.ref(frame)
    jobs.put(([frame], None))
    del frame
    assert pg.called.wait(WAIT)
    gc.collect()
    assert alive() is not None  # the group has not finished with it: the thread still holds it
    pg.release.set()
    jobs.wait_gets(2)  # back for the next job: the send completed
    gc.collect()
    assert alive() is None  # and it let go before waiting
    assert pg.sent == [torch.arange(256, dtype=torch.float32).numpy().tobytes()]
    jobs.put(STOP)


def test_zero_size_frames_are_never_sent() -> None:
    pg, jobs = FakeGroup(), Watched()
    pg.release.set()
    threading.Thread(target=send_loop, args=(HostSide(), pg, jobs, -1), daemon=True).start()
    jobs.put(([memoryview(b""), memoryview(bytearray(b"ab")), torch.zeros(0, dtype=torch.uint8)], None))
    jobs.wait_gets(2)
    assert pg.sent == [b"ab"]
    jobs.put(STOP)


def test_received_frames_land_in_fresh_buffers_handed_over_before_the_message_is_released() -> None:
    side, pg, jobs = RecordingSide(), FakeGroup(), Watched()
    wake_r, wake_w = os.pipe()
    threading.Thread(target=recv_loop, args=(side, pg, jobs, wake_w), daemon=True).start()
    slot = Pending(1, b"head", [bytearray(b"z"), None, None, None], [3, 0, 2])
    side.slot = slot
    jobs.put(slot)
    assert select.select([wake_r], [], [], WAIT)[0] and os.read(wake_r, 1)  # the worker is woken
    assert side.log == ["buffer 3", "buffer 0", "buffer 2", "finish", "hand over 3, released: False"]
    assert not slot.waiting and not slot.error
    assert [bytes(p) for p in slot.parts] == [b"z", b"\x01" * 3, b"", b"\x02" * 2]  # no recv for 0 bytes
    pg.fail = True
    broken = Pending(1, b"head", [None], [4])
    jobs.put(broken)
    assert select.select([wake_r], [], [], WAIT)[0]
    assert broken.error == "RuntimeError: Connection closed by peer" and not broken.done
    jobs.put(STOP)


# ---- two ranks' Edges over real Gloo groups ----------------------------------------------------------


class Counting:
    """A real group that counts the operations posted on it."""

    def __init__(self, pg: Any, ops: list[str]) -> None:
        self.pg, self.ops = pg, ops

    def send(self, *args: Any) -> Any:
        self.ops.append("send")
        return self.pg.send(*args)

    def recv(self, *args: Any) -> Any:
        self.ops.append("recv")
        return self.pg.recv(*args)


@pytest.fixture
def pair(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Edges, Edges]]:
    """Ranks 0 and 1 on two loopback hosts, their Edges built concurrently (each waits for the other)."""
    transport: Transport | None = request.param
    ops: dict[int, list[str]] = {0: [], 1: []}
    real = tensor_edges.make_group

    def counted(backend: str, store: Any, rank: int, address: str) -> Any:
        return Counting(real(backend, store, rank, address), ops[int(address == "127.0.0.3")])

    monkeypatch.setattr(tensor_edges, "make_group", counted)
    plan = plan_of([["cpu"], ["cpu"]], port=free_base_port())
    store = HeadStore(plan)
    built: dict[int, Edges] = {}
    threads = [threading.Thread(target=lambda r=r: built.__setitem__(r, Edges(plan, r, print, transport)))
               for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert set(built) == {0, 1}, "an edge did not connect"
    # every group was used once at start-up, before any message: connected then, not at the first one
    assert ops == {0: ["send", "recv"], 1: ["recv", "send"]}
    yield built[0], built[1]
    for edges in built.values():
        edges.stop()
    store.close()


def messages(tag: str) -> list[Data]:
    return [Data(1, "i", tag, {"z": torch.full((2, 3), 1.5), "ids": torch.arange(4)}),
            Data(2, "i", tag, "no tensor"),
            Data(3, "i", tag, [torch.zeros(0, 3), torch.tensor(9.0), torch.ones(64, 64, dtype=torch.bfloat16)])]


def deliver(edges: Edges, pull: zmq.Socket, count: int) -> list[Data]:
    """A worker's receive path: headers to `expect`, everything in arrival order (worker.py)."""
    order, out, plain = InOrder(), [], Codec()
    while len(out) < count:
        ready = zmq.select([pull, edges.wake_r], [], [], WAIT)[0]
        assert ready, f"only {len(out)} of {count} messages came"
        if edges.wake_r in ready:
            os.read(edges.wake_r, 4096)
        while True:
            try:
                frames = pull.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            order.items.append(edges.expect(frames) if frames[0].bytes == HEADER
                               else plain.decode([f.buffer for f in frames]))
        out += order.released(edges.decode)
    return out


def same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.mark.parametrize("pair", [None, Transport("gloo", "cpu", host_frames=False)], indirect=True,
                         ids=["gloo routing", "nccl routing on host memory"])
def test_two_ranks_edges_carry_messages_both_ways_in_order(pair: tuple[Edges, Edges]) -> None:
    ctx = zmq.Context()
    try:
        pulls, pushes = {}, {}
        for r in (0, 1):
            pulls[r] = ctx.socket(zmq.PULL)
            pulls[r].bind(f"inproc://rank{r}")
        for r in (0, 1):
            pushes[r] = ctx.socket(zmq.PUSH)
            pushes[r].connect(f"inproc://rank{1 - r}")
        sent = {r: messages(f"from {r}") * 3 for r in (0, 1)}
        for msgs in zip(sent[0], sent[1], strict=True):  # both directions at once
            for r in (0, 1):
                pair[r].post(1 - r, pushes[r], msgs[r])
        got = {r: deliver(pair[r], pulls[r], len(sent[1 - r])) for r in (0, 1)}
    finally:
        ctx.destroy(linger=0)
    for r in (0, 1):
        assert [(m.request, m.tag) for m in got[r]] == [(m.request, m.tag) for m in sent[1 - r]]
        assert all(same(a.value, b.value) for a, b in zip(got[r], sent[1 - r], strict=True))


# ---- the CUDA half's stream order (gpu; unverified until a GPU session runs it) --------------------


class Done:
    def wait(self) -> bool:
        return True


class OnStreamGroup:
    """A group whose operations are kernels on the calling thread's current stream (the edge's), as
    ProcessGroupNCCL's are ordered after it: a send copies its payload out, a receive fills its buffer
    after a delay."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def send(self, tensors: list[Any], dst: int, tag: int) -> Done:
        self.seen.append(tensors[0].clone())
        return Done()

    def recv(self, tensors: list[Any], src: int, tag: int) -> Done:
        torch.cuda._sleep(100_000_000)  # the bytes take a while to come
        tensors[0].fill_(5)
        return Done()


def cuda_or_skip() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")


@pytest.mark.gpu
def test_a_cuda_send_reads_its_payload_only_after_the_compute_stream_wrote_it() -> None:
    cuda_or_skip()
    from wgc.runtime.process.edge_device import CudaSide
    from wgc.runtime.process.tensor_edges import send_job

    side, pg = CudaSide("cuda:0"), OnStreamGroup()
    x = torch.zeros(1 << 20, device="cuda:0")
    torch.cuda._sleep(100_000_000)  # the compute stream is still busy when the payload is handed over
    x.fill_(7.0)
    send_job(side, pg, side.new_stream(), [x.view(torch.uint8)], side.mark())
    torch.cuda.synchronize()
    assert bool((pg.seen[0].view(torch.float32) == 7.0).all())


@pytest.mark.gpu
def test_a_cuda_receive_is_complete_when_its_message_is_released() -> None:
    cuda_or_skip()
    from wgc.runtime.process.edge_device import CudaSide

    side, jobs = CudaSide("cuda:0"), Watched()
    wake_r, wake_w = os.pipe()
    threading.Thread(target=recv_loop, args=(side, OnStreamGroup(), jobs, wake_w), daemon=True).start()
    slot = Pending(1, b"head", [None], [1 << 20])
    jobs.put(slot)
    assert select.select([wake_r], [], [], WAIT)[0] and slot.done
    buf = slot.parts[0]
    assert buf.device == torch.device("cuda:0")
    assert bool((buf == 5).all())  # read on the compute stream, with no synchronize of our own
    jobs.put(STOP)
