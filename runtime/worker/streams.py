"""The two ends of a stream on one rank, for one request: credit-limited pushes, chunk buffers to read.

Backpressure is credit based: a producer rank may have at most `capacity`
items of a (request, stream) not yet consumed into a chunk; the consumer hands
credits back as chunks are taken, so buffers never grow past their capacity.
The ends live in their request's RequestState (request_state.py), by stream.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from wgc.plan.model import StreamSpec
from wgc.semantics.stream_buffer import StreamBuffer, buffer_for


@dataclass
class ConsumerEnd:
    buffer: StreamBuffer
    sources: deque[int] = field(default_factory=deque)  # producing rank of each item not yet consumed
    closed_by: set[int] = field(default_factory=set)
    fired: int = 0  # consumer walk instances started
    live: set[str] = field(default_factory=set)  # fired instances still running
    done_reported: bool = False

    def receive(self, source: int, items: list[Any]) -> None:
        for item in items:
            self.buffer.push(item)
            self.sources.append(source)

    def credits(self, consumed_before: int) -> dict[int, int]:
        """Items newly consumed since `consumed_before`, counted per producing rank."""
        out: dict[int, int] = {}
        for _ in range(self.buffer.consumed - consumed_before):
            if self.sources:
                src = self.sources.popleft()
                out[src] = out.get(src, 0) + 1
        return out


@dataclass
class ProducerEnd:
    in_flight: int = 0  # pushed and not yet credited back
    pushed: int = 0  # pushed in all, where this rank is the stream's only producer (held_items.py)


def new_consumer(spec: StreamSpec) -> ConsumerEnd:
    return ConsumerEnd(buffer_for(spec, capacity=0))  # unbounded here: the producers' credits bound it
