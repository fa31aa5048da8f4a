"""Blocking work of a request off the event loop: decoding media, rendering the chat template,
tokenising, reading tensors. It runs on at most `threads` worker threads at once (requests beyond
wait for one, in order), so the loop keeps answering `/health` and streaming other requests while a
large request is prepared. Pillow and torch release the GIL while they work; Python-level work
yields it every few milliseconds.

A small request is prepared on the loop instead (`inline`): profiling a trivial chat request
(cProfile of the server under 64 connections, bench/http_overhead.py) showed the hop to a worker
thread and back (anyio's run_sync: a future, a thread wake-up, the GIL handed over twice, a
call_soon_threadsafe) costing more than the work it moved: a body of a few KiB holds no media
worth decoding on a thread and a prompt whose template and tokens take tens of microseconds.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from starlette.requests import Request

from wgc import settings

T = TypeVar("T")
DEFAULT_THREADS = min(4, os.cpu_count() or 1)
INLINE_BODY_BYTES = 8 * 1024  # a body under this is prepared on the event loop (see the docstring)


class Offload:
    def __init__(self, threads: int = DEFAULT_THREADS) -> None:
        self.limiter = anyio.CapacityLimiter(threads)
        self.inline_bytes = 0 if settings.http_plain() else INLINE_BODY_BYTES

    async def run(self, fn: Callable[..., T], *args: Any, request: Request | None = None) -> T:
        """`fn(*args)` on a worker thread; on the loop itself when `request`'s body is small."""
        if request is not None and self.small(request):
            return fn(*args)
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    def small(self, request: Request) -> bool:
        """Whether the request's body is under `inline_bytes` by its Content-Length (none: not small)."""
        length = request.headers.get("content-length", "")
        return length.isdigit() and int(length) < self.inline_bytes
