"""Admission control at the front door: a number of running slots and a bounded queue.

A request takes `weight` slots (its number of choices) while it runs; one wider than all the
slots is refused (TooWide). When none are free it waits in a FIFO queue of at most `max_queued`
requests; when the queue is full too, it is refused at once (429) with a Retry-After estimated
from how long recent requests held their slots. Waiting ends when a slot frees, or with the
caller's cancellation (a timeout, a disconnect), which leaves the queue clean. The limits may
change once (`resize`: the server sizes them from the KV pools after start-up). Pure asyncio,
no I/O: unit-tested directly.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Capacity:
    max_running: int  # slots: requests (choices) running at once
    max_queued: int  # requests waiting for slots

    def __post_init__(self) -> None:
        if self.max_running < 1 or self.max_queued < 0:
            raise ValueError(f"capacity needs max_running >= 1 and max_queued >= 0, found {self}")


class TooWide(ValueError):
    """A request of more choices than there are slots: it could never run."""

    def __init__(self, weight: int, slots: int) -> None:
        super().__init__(f"a request of {weight} choices exceeds the {slots} slots")
        self.weight = weight
        self.slots = slots


class Full(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__(f"over capacity: retry after {retry_after} s")
        self.retry_after = retry_after


class Admission:
    def __init__(self, capacity: Capacity) -> None:
        self.capacity = capacity
        self.running = 0
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._mean_hold = 1.0  # seconds a slot is held, moving average

    @property
    def queued(self) -> int:
        return len(self._waiting)

    def retry_after(self) -> int:
        rounds = 1 + self.queued / self.capacity.max_running
        return max(1, min(60, math.ceil(self._mean_hold * rounds)))

    @asynccontextmanager
    async def slot(self, weight: int = 1, wait: float | None = None) -> AsyncIterator[None]:
        """Hold `weight` slots for the body; Full when neither a slot nor a queue place is free,
        TimeoutError after waiting `wait` seconds in the queue."""
        if weight > self.capacity.max_running:
            raise TooWide(weight, self.capacity.max_running)
        async with asyncio.timeout(wait):
            await self._enter(weight)
        start = time.monotonic()
        try:
            yield
        finally:
            self._mean_hold = 0.8 * self._mean_hold + 0.2 * (time.monotonic() - start)
            self.running -= weight
            self._wake()

    async def _enter(self, weight: int) -> None:
        if not self._waiting and self.running + weight <= self.capacity.max_running:
            self.running += weight
            return
        if len(self._waiting) >= self.capacity.max_queued:
            raise Full(self.retry_after())
        entry = (weight, asyncio.get_running_loop().create_future())
        self._waiting.append(entry)
        try:
            await entry[1]
        except BaseException:
            if entry[1].done() and not entry[1].cancelled() and entry[1].exception() is None:
                self.running -= weight  # granted just as we were cancelled: hand it back
                self._wake()
            elif entry in self._waiting:
                self._waiting.remove(entry)
                self._wake()
            raise

    def resize(self, capacity: Capacity) -> None:
        """New limits (the server learns its KV pools after start-up). Waiters wider than the new
        slots are refused with TooWide; the others are granted in order while they fit."""
        self.capacity = capacity
        for entry in [e for e in self._waiting if e[0] > capacity.max_running]:
            self._waiting.remove(entry)
            if not entry[1].done():
                entry[1].set_exception(TooWide(entry[0], capacity.max_running))
        self._wake()

    def _wake(self) -> None:
        """Grant slots to waiters in order, while the first one fits."""
        while self._waiting and self.running + self._waiting[0][0] <= self.capacity.max_running:
            weight, fut = self._waiting.popleft()
            if fut.done():
                continue
            self.running += weight
            fut.set_result(None)
