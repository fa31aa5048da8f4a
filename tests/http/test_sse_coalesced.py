"""SSE frames ready in one turn go out as one chunk (serving/streaming.coalesced), without holding any
back: the streamed bytes are the same frames in the same order; queued events go out together; an
event that arrives alone goes out alone before the next one exists; what was rendered before an
error still reaches the client. A handle's `pending` says whether an event waits."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from wgc.runtime.coordinator.core import Event
from wgc.runtime.http.admission.running import Running
from wgc.runtime.http.serving.errors import ApiError
from wgc.runtime.http.serving.metrics import Metrics
from wgc.runtime.http.serving.streaming import coalesced, merged
from wgc.runtime.process.handle import RequestHandle
from wgc.runtime.protocol.messages import Output


def output(request: int, seq: int) -> Event:
    return Event(request, "output", Output(request, "text", seq, "w", 0, seq))


def running(request: int = 1) -> tuple[RequestHandle, Running]:
    handle = RequestHandle(None, request, time.perf_counter())  # type: ignore[arg-type]  # no cancel here
    return handle, Running(handle, Metrics(), time.monotonic() + 30)


def render(i: int, event: Any) -> list[bytes]:
    """Two frames for each output (as a delta and its finish may be), none for the end."""
    if event.__class__.__name__ != "OutputEvent":
        return []
    return [f"data: {i}.{event.payload}a\n\n".encode(), f"data: {i}.{event.payload}b\n\n".encode()]


def tail() -> list[bytes]:
    return [b"data: usage\n\n", b"data: [DONE]\n\n"]


def frames(seqs: list[int]) -> bytes:
    return b"".join(f"data: 0.{s}a\n\ndata: 0.{s}b\n\n".encode() for s in seqs) + b"data: usage\n\ndata: [DONE]\n\n"


def test_events_queued_together_go_out_as_one_chunk_in_order() -> None:
    async def main() -> list[bytes]:
        handle, run = running()
        for seq in range(4):
            handle.deliver(output(1, seq))
        handle.deliver(Event(1, "done"))
        assert handle.pending() and run.pending()
        return [chunk async for chunk in coalesced(merged([run]), [run], render, tail)]

    chunks = asyncio.run(main())
    assert chunks == [frames([0, 1, 2, 3])]


def test_an_event_alone_goes_out_before_the_next_one_arrives() -> None:
    async def main() -> list[tuple[str, bytes]]:
        handle, run = running()
        log: list[tuple[str, bytes]] = []
        stream = coalesced(merged([run]), [run], render, tail)
        handle.deliver(output(1, 0))
        # returned with nothing more delivered: not held back (the bound only keeps a broken one from hanging)
        log.append(("sent", await asyncio.wait_for(anext(stream), 10)))
        handle.deliver(output(1, 1))
        handle.deliver(output(1, 2))
        log.append(("sent", await asyncio.wait_for(anext(stream), 10)))
        handle.deliver(Event(1, "done"))
        log += [("sent", chunk) async for chunk in stream]
        return log

    log = asyncio.run(main())
    assert [chunk for _, chunk in log] == [b"data: 0.0a\n\ndata: 0.0b\n\n",
                                           b"data: 0.1a\n\ndata: 0.1b\n\ndata: 0.2a\n\ndata: 0.2b\n\n",
                                           b"data: usage\n\ndata: [DONE]\n\n"]
    assert b"".join(chunk for _, chunk in log) == frames([0, 1, 2])


def test_frames_rendered_before_an_error_are_sent_before_it_is_raised() -> None:
    async def main() -> tuple[list[bytes], BaseException | None]:
        handle, run = running()
        handle.deliver(output(1, 0))
        handle.deliver(output(1, 1))
        handle.deliver(Event(1, "error", error="lm.decode raised"))
        got: list[bytes] = []
        try:
            async for chunk in coalesced(merged([run]), [run], render, tail):
                got.append(chunk)
        except ApiError as err:
            return got, err
        return got, None

    got, err = asyncio.run(main())
    assert isinstance(err, ApiError) and err.code == "request_failed"
    assert got == [b"data: 0.0a\n\ndata: 0.0b\n\ndata: 0.1a\n\ndata: 0.1b\n\n"]


def test_several_choices_keep_each_ones_order() -> None:
    async def main() -> list[bytes]:
        (h0, r0), (h1, r1) = running(1), running(2)
        for seq in range(3):
            h0.deliver(output(1, seq))
            h1.deliver(output(2, 10 + seq))
        h0.deliver(Event(1, "done"))
        h1.deliver(Event(2, "done"))
        return [chunk async for chunk in coalesced(merged([r0, r1]), [r0, r1], render, tail)]

    text = b"".join(asyncio.run(main())).decode()
    for i, seqs in ((0, (0, 1, 2)), (1, (10, 11, 12))):
        where = [text.index(f"data: {i}.{s}a") for s in seqs]
        assert where == sorted(where)
    assert text.endswith("data: usage\n\ndata: [DONE]\n\n")


@pytest.mark.parametrize("ended", [False, True])
def test_pending_is_what_events_would_hand_out_now(ended: bool) -> None:
    async def main() -> None:
        handle, run = running()
        assert not handle.pending()
        handle.deliver(output(1, 0))
        assert handle.pending()
        if ended:
            handle.deliver(Event(1, "done"))
            assert len([e async for e in handle.events()]) == 2
            assert not handle.pending()  # ended: nothing more is handed out
        else:
            await anext(run.events())
            assert not run.pending()

    asyncio.run(main())
