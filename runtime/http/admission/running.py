"""One runtime request as the HTTP layer runs it: its events under a deadline, timed, and always ended.

`events()` yields the request's events until the final one and raises ApiError for a request
that ends in an error (a dead rank: 503; a component failure: 422) or runs past its deadline
(504). `close()` cancels a request that has not ended and waits for every rank to acknowledge
that it freed the request's pages and buffers; it is shielded, so it completes even when the
caller is being cancelled (a client that disconnected).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from wgc.runtime.api import CancelledEvent, ErrorEvent, OutputEvent, RequestEvent, RequestHandle
from wgc.runtime.http.serving.errors import ApiError
from wgc.runtime.http.serving.metrics import Metrics

_CANCEL_ACK_TIMEOUT = 10.0


class Running:
    def __init__(self, handle: RequestHandle, metrics: Metrics, deadline: float) -> None:
        self.handle = handle
        self.metrics = metrics
        self.deadline = deadline  # time.monotonic() by which the request must end
        self._last: dict[str, float] = {}  # modality -> t_since_submit of its last output
        self._observers: dict[str, tuple[Any, Any]] = {}  # modality -> its (first, inter) histogram children
        self._closing = False  # we cancel it: its CancelledEvent is the expected end, not an error
        self._cancel: asyncio.Future[Any] | None = None
        self._waiter: asyncio.Task[Any] | None = None  # the task waiting in events() for the next event
        self._expired = False  # the deadline's timer fired

    async def events(self) -> AsyncIterator[RequestEvent]:
        """The events until the final one. The deadline is one timer for the whole request, not a
        timeout around each wait (an `asyncio.timeout` an event was ~5% of the server's CPU at 64
        streams): when it fires it cancels the task waiting here, which raises request_timeout; a
        cancel that is not the timer's (a client that went away) goes on as a cancel."""
        it = self.handle.events().__aiter__()
        loop = asyncio.get_running_loop()
        timer = loop.call_at(loop.time() + self.deadline - time.monotonic(), self._expire)
        try:
            while True:
                if self._expired or time.monotonic() >= self.deadline:
                    raise _timed_out()
                task = asyncio.current_task()
                cancelling = task.cancelling() if task is not None else 0
                self._waiter = task
                try:
                    event = await anext(it)
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    if self._expired and task is not None and task.uncancel() <= cancelling:
                        raise _timed_out() from None
                    raise
                finally:
                    self._waiter = None
                if isinstance(event, OutputEvent):
                    self._observe(event)
                elif isinstance(event, ErrorEvent):
                    raise failure(event.error)
                elif isinstance(event, CancelledEvent):
                    if self._closing:
                        return
                    raise ApiError("shutting_down", "the request was cancelled by the server")
                yield event
                if self.handle.final is not None and event is self.handle.final:
                    return
        finally:
            timer.cancel()

    def _expire(self) -> None:
        self._expired = True
        if self._waiter is not None:
            self._waiter.cancel()

    def pending(self) -> bool:
        """An event of this request is already queued: `events()` yields it without waiting."""
        return self.handle.pending()

    def ended(self) -> bool:
        """Its final event has arrived: what `events()` still yields needs no waiting."""
        return self.handle.final is not None

    def _observe(self, event: OutputEvent) -> None:
        modality = event.modality
        observers = self._observers.get(modality)
        if observers is None:  # the labelled children looked up once a request and modality
            observers = self._observers[modality] = (self.metrics.first_output.labels(modality),
                                                     self.metrics.inter_output.labels(modality))
        last = self._last.get(modality)
        if last is None:
            observers[0].observe(event.t_since_submit)
        else:
            observers[1].observe(max(0.0, event.t_since_submit - last))
        self._last[modality] = event.t_since_submit

    def stop(self) -> None:
        """Start cancelling the request if it has not ended (its events then end quietly); `close()`
        waits for the ranks to confirm."""
        if self.handle.final is None and self._cancel is None:
            self._closing = True
            self.metrics.cancelled.inc()
            self._cancel = asyncio.ensure_future(self.handle.cancel(timeout=_CANCEL_ACK_TIMEOUT))

    async def close(self) -> None:
        """Cancel the request if it has not ended; wait for every rank's acknowledgement."""
        self.stop()
        if self._cancel is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                await self._cancel
            except TimeoutError:
                pass  # a rank that does not answer is reported by /health


def _timed_out() -> ApiError:
    return ApiError("request_timeout", "the request ran past its timeout and was cancelled")


def failure(error: str) -> ApiError:
    """The ApiError for a request that ended with `error` (the runtime's one-line message)."""
    if " is down" in error:
        return ApiError("rank_down", error)
    if "shutting down" in error:
        return ApiError("shutting_down", error)
    return ApiError("request_failed", error)
