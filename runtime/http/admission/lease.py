"""A request's hold on the server: its admission slots and its runtime requests, given back together.

`release()` never makes a response wait: it cancels what has not ended and hands the slots back
once every rank acknowledged that it freed the requests, in a background task the Service owns.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

from wgc.runtime.http.admission.running import Running
from wgc.runtime.http.serving.service import Service


class Lease:
    def __init__(self, service: Service) -> None:
        self.service = service
        self._stack = AsyncExitStack()
        self._released = False

    async def open(self, weight: int, deadline: float, requests: list[dict[str, Any]]) -> list[Running]:
        """Take `weight` slots (waiting in the queue if need be), then submit each request."""
        await self._stack.enter_async_context(self.service.admitted(weight, deadline))
        out = []
        for fields in requests:
            running = self.service.submit(deadline, **fields)
            self._stack.push_async_callback(running.close)  # runs before the slots are given back
            out.append(running)
        return out

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.service.background(self._stack.aclose())
