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
        self._closing = False  # we cancel it: its CancelledEvent is the expected end, not an error
        self._cancel: asyncio.Future[Any] | None = None

    async def events(self) -> AsyncIterator[RequestEvent]:
        it = self.handle.events().__aiter__()
        while True:
            remaining = self.deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise TimeoutError
                async with asyncio.timeout(remaining):
                    event = await anext(it)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise ApiError("request_timeout", "the request ran past its timeout and was cancelled") from None
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

    def pending(self) -> bool:
        """An event of this request is already queued: `events()` yields it without waiting."""
        return self.handle.pending()

    def ended(self) -> bool:
        """Its final event has arrived: what `events()` still yields needs no waiting."""
        return self.handle.final is not None

    def _observe(self, event: OutputEvent) -> None:
        last = self._last.get(event.modality)
        if last is None:
            self.metrics.first_output.labels(event.modality).observe(event.t_since_submit)
        else:
            self.metrics.inter_output.labels(event.modality).observe(max(0.0, event.t_since_submit - last))
        self._last[event.modality] = event.t_since_submit

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


def failure(error: str) -> ApiError:
    """The ApiError for a request that ended with `error` (the runtime's one-line message)."""
    if " is down" in error:
        return ApiError("rank_down", error)
    if "shutting down" in error:
        return ApiError("shutting_down", error)
    return ApiError("request_failed", error)
