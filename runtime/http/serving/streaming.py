"""Plumbing shared by the routes: JSON bytes, SSE and NDJSON frames, several requests as one
stream, and work that stops when the client goes away.

Disconnects. A streaming response is cancelled by Starlette when the client disconnects; a
route that answers in one piece runs its work under `guarded`, which watches the connection and
cancels the work when the client leaves. Either way the work's `finally` releases its Lease,
which cancels the requests on every rank.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from wgc.runtime.api import RequestEvent
from wgc.runtime.http.admission.lease import Lease
from wgc.runtime.http.admission.running import Running
from wgc.runtime.http.serving.errors import ApiError
from wgc.runtime.http.serving.metrics import Metrics

T = TypeVar("T")
log = logging.getLogger("wgc.http")
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class ClientGone(Exception):
    """The client closed the connection before the answer was ready."""


def _default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if isinstance(value, bytes):
        return value.decode("latin-1")
    raise TypeError(f"cannot encode a {type(value).__name__} as JSON")


def json_bytes(obj: Any) -> bytes:
    return msgspec.json.encode(obj, enc_hook=_default)


def json_response(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json_bytes(obj), status_code=status, headers=headers, media_type="application/json")


def sse(obj: Any) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json_bytes(obj)) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


async def coalesced(events: AsyncIterator[tuple[int, RequestEvent]], runnings: list[Running],
                    render: Callable[[int, RequestEvent], list[bytes]],
                    tail: Callable[[], list[bytes]]) -> AsyncIterator[bytes]:
    """A stream's frames with every frame ready in one turn sent as one chunk: `render(i, event)` is an
    event's frames, `tail()` the frames after the last event. After each event, the frames so far go
    out at once unless another event of the stream is already queued or every request has ended (then
    what follows comes without waiting), so the first token is never held back and the frames keep
    their order; the frames of one event, the events that piled up while the loop was busy, and the
    last delta with usage and [DONE] go out together. Each chunk was one uvicorn send (~0.13 ms,
    ~20% of the front end at 16 streams)."""
    frames: list[bytes] = []
    try:
        async for i, event in events:
            frames += render(i, event)
            if frames and not any(r.pending() for r in runnings) and not all(r.ended() for r in runnings):
                yield b"".join(frames)
                frames = []
    except Exception:
        if frames:  # what was rendered before the error reaches the client ahead of the error frame
            yield b"".join(frames)
        raise
    frames += tail()
    if frames:
        yield b"".join(frames)


async def merged(runnings: list[Running]) -> AsyncIterator[tuple[int, RequestEvent]]:
    """The events of several requests as they come, each with its request's index."""
    if len(runnings) == 1:
        async for event in runnings[0].events():
            yield 0, event
        return
    queue: asyncio.Queue[tuple[int, RequestEvent | None, BaseException | None]] = asyncio.Queue()

    async def pump(i: int, running: Running) -> None:
        try:
            async for event in running.events():
                queue.put_nowait((i, event, None))
        except Exception as err:  # noqa: BLE001 - handed to the consumer, which raises it
            queue.put_nowait((i, None, err))
            return
        queue.put_nowait((i, None, None))

    tasks = [asyncio.ensure_future(pump(i, r)) for i, r in enumerate(runnings)]
    try:
        left = len(tasks)
        while left:
            i, event, err = await queue.get()
            if err is not None:
                raise err
            if event is None:
                left -= 1
            else:
                yield i, event
    finally:
        for t in tasks:
            t.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.gather(*tasks, return_exceptions=True)


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def guarded(request: Request, work: Awaitable[T]) -> T:
    """`work`'s result; ClientGone (with `work` cancelled and cleaned up) if the client leaves first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        raise ClientGone()
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.gather(task, return_exceptions=True)
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


class _Aborted(Exception):
    """The body failed after the response began and its format has no way to say so: cut it off."""


class _Stream(StreamingResponse):
    async def stream_response(self, send: Any) -> None:
        try:
            await super().stream_response(send)
        except _Aborted:
            pass  # no final chunk: the server closes the connection, so the client sees a cut-off body


def stream_response(body: AsyncIterator[bytes], lease: Lease, metrics: Metrics, route: str, media_type: str,
                    headers: dict[str, str] | None = None,
                    error_frame: Callable[[ApiError], bytes] | None = None) -> StreamingResponse:
    """A streaming response over `body`; the lease is released when it ends, however it ends.

    A body that fails after the response began ends with `error_frame(err)` (the route's error
    event or line) or, for a format without one (raw audio), is cut off; either way one line is
    logged (a bug's traceback once), never a "response already started" error from the server."""

    async def frames() -> AsyncIterator[bytes]:
        last = None
        interval = metrics.chunk_interval.labels(route)  # looked up once a stream, not once a chunk
        try:
            async for chunk in body:
                now = time.monotonic()
                if last is not None:
                    interval.observe(now - last)
                last = now
                yield chunk
        except Exception as err:  # the response has begun: end it in its own format
            if isinstance(err, ApiError):
                log.warning("wgc http: a %s stream ended early: %s (%s)", route, err.message, err.code)
            else:
                log.exception("wgc http: a %s stream failed", route)
                err = ApiError("internal_error", f"internal error: {type(err).__name__}")
            if error_frame is None:
                raise _Aborted from None
            yield error_frame(err)
        finally:
            lease.release()

    return _Stream(frames(), media_type=media_type, headers={**STREAM_HEADERS, **(headers or {})})


async def opened(lease: Lease, weight: int, deadline: float, requests: list[dict[str, Any]],
                 events: Callable[[list[Running]], AsyncIterator[T]]) -> tuple[list[Running], AsyncIterator[T]]:
    """A streamed answer's requests admitted under `lease` and their events with the first one awaited
    (prefetched); the lease is released here if that fails, and by the stream once it is handed over."""
    try:
        runnings = await lease.open(weight, deadline, requests)
        return runnings, await prefetched(events(runnings))
    except BaseException:
        lease.release()
        raise


def only_events(runnings: list[Running]) -> AsyncIterator[RequestEvent]:
    """The events of a route's one request (`opened`'s `events` for single-request routes)."""
    (running,) = runnings
    return running.events()


async def prefetched(events: AsyncIterator[T]) -> AsyncIterator[T]:
    """Wait for the first item (so that an error before any output still gets its own status code),
    then hand out every item from the first on."""
    it = events.__aiter__()
    try:
        head = [await anext(it)]
    except StopAsyncIteration:
        head = []

    async def replay() -> AsyncIterator[T]:
        for item in head:
            yield item
        async for item in it:
            yield item

    return replay()
