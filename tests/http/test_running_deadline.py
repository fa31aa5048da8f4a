"""A request's deadline in the HTTP layer (runtime/http/admission/running.py) is one timer for the whole
request: it ends a wait with request_timeout, it is honoured when it passed between two events, a
cancel that is not its own (a client that went away) stays a cancel, and it is gone once the
request ends (no late firing). No timing is asserted beyond "before a bound"."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from wgc.runtime.coordinator.core import Event
from wgc.runtime.http.admission.running import Running
from wgc.runtime.http.serving.errors import ApiError
from wgc.runtime.http.serving.metrics import Metrics
from wgc.runtime.process.handle import RequestHandle
from wgc.runtime.protocol.messages import Output


def _running(seconds: float) -> tuple[RequestHandle, Running]:
    handle = RequestHandle(None, 1, time.perf_counter())  # type: ignore[arg-type]  # no cancel here
    return handle, Running(handle, Metrics(), time.monotonic() + seconds)


def _token(handle: RequestHandle, seq: int) -> None:
    handle.deliver(Event(1, "output", output=Output(1, "text", seq, "decode", 0, seq)))


async def _collect(running: Running, out: list[Any]) -> None:
    async for event in running.events():
        out.append(event.payload if hasattr(event, "payload") else "done")


def test_a_wait_past_the_deadline_ends_in_request_timeout() -> None:
    async def main() -> list[Any]:
        handle, running = _running(0.05)
        _token(handle, 0)
        got: list[Any] = []
        task = asyncio.ensure_future(_collect(running, got))
        await asyncio.wait({task}, timeout=5)  # the deadline's own timer ends the wait, nothing else does
        assert task.done(), "the deadline passed and the wait went on"
        assert isinstance(task.exception(), ApiError) and task.exception().code == "request_timeout"
        return got

    assert asyncio.run(main()) == [0]  # the event before the deadline came out first


def test_a_deadline_that_passed_while_the_consumer_was_busy_ends_the_next_wait() -> None:
    async def main() -> None:
        handle, running = _running(0.05)
        it = running.events().__aiter__()
        _token(handle, 0)
        await anext(it)
        await asyncio.sleep(0.1)  # busy elsewhere (a slow send) past the deadline
        _token(handle, 1)
        with pytest.raises(ApiError, match="ran past its timeout"):
            await anext(it)

    asyncio.run(asyncio.wait_for(main(), 5))


def test_a_cancel_that_is_not_the_deadlines_stays_a_cancel() -> None:
    async def main() -> None:
        handle, running = _running(30)
        task = asyncio.ensure_future(_collect(running, []))
        await asyncio.sleep(0.01)
        task.cancel()  # the client went away
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not running._expired

    asyncio.run(asyncio.wait_for(main(), 5))


def test_the_deadline_is_gone_once_the_request_ended() -> None:
    async def main() -> list[Any]:
        handle, running = _running(0.05)
        got: list[Any] = []
        for seq in range(3):
            _token(handle, seq)
        handle.deliver(Event(1, "done"))
        await _collect(running, got)
        await asyncio.sleep(0.1)  # past the deadline: a timer left behind would fire now
        assert not running._expired
        return got

    assert asyncio.run(main()) == [0, 1, 2, "done"]
