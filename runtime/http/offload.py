"""Blocking work of a request off the event loop: decoding media, rendering the chat template,
tokenising, reading tensors. It runs on at most `threads` worker threads at once (requests beyond
wait for one, in order), so the loop keeps answering `/health` and streaming other requests while a
large request is prepared. Pillow and torch release the GIL while they work; Python-level work
yields it every few milliseconds.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")
DEFAULT_THREADS = min(4, os.cpu_count() or 1)


class Offload:
    def __init__(self, threads: int = DEFAULT_THREADS) -> None:
        self.limiter = anyio.CapacityLimiter(threads)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter)
