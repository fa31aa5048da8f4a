"""A submitted request as its caller sees it: typed events in order, collect, cancel with acknowledgements."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from wgc.runtime.coordinator.core import Event
from wgc.runtime.process.coordinator import Coordinator
from wgc.runtime.process.events import (
    FINAL,
    CancelledEvent,
    DoneEvent,
    ErrorEvent,
    OutputEvent,
    RequestEvent,
    describe,
)


class RequestFailed(RuntimeError):
    """`RequestHandle.collect()` on a request that ended in an error or was cancelled."""


@dataclass(frozen=True)
class CancelResult:
    request: int
    was_running: bool  # False: it had already ended, there was nothing to free
    acked_by: tuple[int, ...]  # the ranks that confirmed they freed everything of the request


class RequestHandle:
    """One submitted request: its events, in order, for one consumer."""

    def __init__(self, coordinator: Coordinator, request: int, submitted: float) -> None:
        self.id = request
        self._coordinator = coordinator
        self._t0 = submitted
        self._queue: asyncio.Queue[RequestEvent] = asyncio.Queue()
        self._first: float | None = None
        self._outputs = 0
        self.final: RequestEvent | None = None
        self._ended = False  # the final event has been handed out

    def deliver(self, e: Event) -> None:
        """The coordinator's event for this request, typed and timed, queued for `events()`."""
        now = time.perf_counter() - self._t0
        event: RequestEvent
        if e.kind == "output" and e.output is not None:
            out = e.output
            self._first = now if self._first is None else self._first
            self._outputs += 1
            shape, dtype = describe(out.value)
            event = OutputEvent(self.id, out.modality, out.value, shape, dtype, out.walk, out.rank, out.seq,
                                now, self._first)
        elif e.kind == "done":
            event = DoneEvent(self.id, self._outputs, now, self._first, tuple(e.cut))
        elif e.kind == "cancelled":
            event = CancelledEvent(self.id, now)
        else:
            event = ErrorEvent(self.id, e.error, now)
        if isinstance(event, FINAL):
            self.final = event
        self._queue.put_nowait(event)

    def pending(self) -> bool:
        """Events are queued that `events()` would hand out now, without waiting."""
        return not self._ended and not self._queue.empty()

    async def events(self) -> AsyncIterator[RequestEvent]:
        """Every event of the request as it happens; the last one is a Done, Error or CancelledEvent.
        Events go to one consumer: once the final event was handed out, this yields nothing more."""
        while not self._ended:
            event = await self._queue.get()
            self._ended = isinstance(event, FINAL)
            yield event

    async def collect(self) -> dict[str, list[Any]]:
        """The request's outputs by modality, once it is done; RequestFailed if it is not."""
        out: dict[str, list[Any]] = {}
        async for event in self.events():
            if isinstance(event, OutputEvent):
                out.setdefault(event.modality, []).append(event.payload)
            elif isinstance(event, ErrorEvent):
                raise RequestFailed(event.error)
            elif isinstance(event, CancelledEvent):
                raise RequestFailed(f"request {self.id} was cancelled")
        return out

    async def cancel(self, timeout: float = 10.0) -> CancelResult:
        """Stop the request; returns once every live rank acknowledged that it freed all of it."""
        coordinator = self._coordinator
        wait = coordinator.cancel(self.id)
        if wait is None:
            return CancelResult(self.id, False, ())
        await asyncio.wait([wait.done], timeout=timeout)
        if not wait.done.done():
            coordinator.acks.pop(self.id, None)
            late = ", ".join(str(r) for r in sorted(wait.waiting))
            raise TimeoutError(f"request {self.id}: rank {late} did not acknowledge the cancel within {timeout:g} s")
        return CancelResult(self.id, True, tuple(sorted(wait.acked)))
