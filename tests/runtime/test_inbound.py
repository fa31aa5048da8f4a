"""What the process coordinator sends a rank in one turn of its event loop leaves as one `Inbound`,
in the order sent (runtime/process/coordinator.py), and the worker takes each item as if it came
alone (runtime/process/worker.py): a burst of submits reaches the worker whole. Real ZeroMQ sockets
over IPC in a temporary directory; the coordinator's sockets alone, without its core."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import zmq
from wgc.runtime.process import wire
from wgc.runtime.process.coordinator import Coordinator
from wgc.runtime.process.edge_frames import InOrder
from wgc.runtime.process.worker import Worker
from wgc.runtime.protocol.codec import Codec
from wgc.runtime.protocol.messages import Cancel, Data, HealthQuery, Inbound, Message, Shutdown


@pytest.fixture
def wired(tmp_path: Path) -> Iterator[tuple[Coordinator, list[zmq.Socket]]]:
    """A coordinator whose outboxes reach two PULL sockets bound here, as the ranks' inboxes."""
    ctx = zmq.Context()
    ends = [f"ipc://{tmp_path}/rank{r}" for r in range(2)]
    inboxes = [wire.pull_socket(ctx, ep) for ep in ends]
    coord = Coordinator.__new__(Coordinator)
    coord.codec, coord.down, coord._held = Codec(), {}, {}
    coord.outboxes = [wire.push_socket(ctx, ep) for ep in ends]
    yield coord, inboxes
    for s in [*coord.outboxes, *inboxes]:
        s.close(linger=0)
    ctx.term()


def _received(sock: zmq.Socket, codec: Codec, wait_ms: int = 500) -> list[Message]:
    """Every message on `sock`: the first waited for up to `wait_ms`, the rest already there."""
    out: list[Message] = []
    while sock.poll(wait_ms if not out else 50):
        out.append(wire.decode(codec, sock.recv_multipart(copy=False)))
    return out


def test_one_turns_messages_to_a_rank_leave_as_one_inbound_in_order(wired: Any) -> None:
    coord, inboxes = wired
    first = [Cancel(1, "a"), Cancel(2, "b"), HealthQuery(False)]

    async def turns() -> None:
        for msg in first:
            coord.send(0, msg)
        coord.send(1, Cancel(3, "c"))
        assert not inboxes[0].poll(100), "held until the turn ends"
        await asyncio.sleep(0)  # the turn ends: the held messages go
        coord.send(0, Cancel(4, "d"))  # a later turn: a message of its own

    asyncio.run(turns())
    assert _received(inboxes[0], coord.codec) == [Inbound(first), Cancel(4, "d")]
    assert _received(inboxes[1], coord.codec) == [Cancel(3, "c")]  # a lone message goes as itself


def test_shutdown_sends_what_is_held_first_and_does_not_wait_for_the_turn(wired: Any) -> None:
    coord, inboxes = wired

    async def stop() -> list[Message]:
        coord.send(0, Cancel(1, "shutting down"))
        coord.shutdown(0)
        return _received(inboxes[0], coord.codec)  # before the turn ends

    assert asyncio.run(stop()) == [Cancel(1, "shutting down"), Shutdown()]


def test_a_rank_marked_down_gets_nothing_of_what_was_held_for_it(wired: Any) -> None:
    coord, inboxes = wired

    async def down() -> None:
        coord.send(0, Cancel(1, "x"))
        coord.down[0] = "gone"
        await asyncio.sleep(0)

    asyncio.run(down())
    assert _received(inboxes[0], coord.codec, wait_ms=200) == []


def test_the_codec_carries_an_inbound_with_tensors() -> None:
    codec = Codec()
    items: list[Any] = [Cancel(1, "a"), Data(2, "w#0", "x", torch.arange(6, dtype=torch.float32).reshape(2, 3))]
    back = codec.decode(codec.encode(Inbound(items)))
    assert isinstance(back, Inbound) and back.items[0] == items[0]
    assert torch.equal(back.items[1].value, items[1].value) and back.items[1].tag == "x"


class _Gate:
    def __init__(self) -> None:
        self.delivered: list[Message] = []

    def deliver(self, msg: Message) -> None:
        self.delivered.append(msg)


def test_the_worker_takes_each_item_of_an_inbound_in_order_and_stops_at_a_shutdown_inside(tmp_path: Path) -> None:
    ctx = zmq.Context()
    codec = Codec()
    worker = Worker.__new__(Worker)
    worker.inbox = wire.pull_socket(ctx, f"ipc://{tmp_path}/rank0")
    worker.codec, worker.edges, worker.local, worker.in_order = codec, None, deque(), InOrder()
    worker.gate = _Gate()  # type: ignore[assignment]
    out = wire.push_socket(ctx, f"ipc://{tmp_path}/rank0")
    try:
        wire.send(out, codec, Inbound([Cancel(1, "a"), Cancel(2, "b")]))
        wire.send(out, codec, Cancel(3, "c"))
        assert worker.inbox.poll(1000)
        while worker.gate.delivered != [Cancel(1, "a"), Cancel(2, "b"), Cancel(3, "c")]:
            assert worker.inbox.poll(1000), worker.gate.delivered
            assert worker._take_waiting()
        wire.send(out, codec, Inbound([Cancel(4, "d"), Shutdown(), Cancel(5, "never")]))
        assert worker.inbox.poll(1000)
        assert worker._take_waiting() is False
        assert worker.gate.delivered[-1] == Cancel(4, "d")
    finally:
        out.close(linger=0)
        worker.inbox.close(linger=0)
        ctx.term()
