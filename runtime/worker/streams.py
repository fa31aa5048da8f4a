"""Both ends of every stream on one rank: credit-limited pushes, and chunk buffers on the consumer side.

Backpressure is credit based: a producer rank may have at most `capacity`
items of a (request, stream) not yet consumed into a chunk; the consumer hands
credits back as chunks are taken, so buffers never grow past their capacity.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from wgc.runtime.streams.buffer import StreamBuffer
from wgc.runtime.streams.policy import make_policy

from wgc.plan.model import StreamSpec


@dataclass
class ConsumerEnd:
    buffer: StreamBuffer
    sources: deque[int] = field(default_factory=deque)  # producing rank of each item not yet consumed
    closed_by: set[int] = field(default_factory=set)
    fired: int = 0  # consumer walk instances started
    live: set[str] = field(default_factory=set)  # fired instances still running
    done_reported: bool = False


@dataclass
class ProducerEnd:
    in_flight: int = 0  # pushed and not yet credited back


def new_consumer(spec: StreamSpec) -> ConsumerEnd:
    policy = make_policy(spec.policy, spec.policy_args)
    return ConsumerEnd(StreamBuffer(policy, spec.at_end, spec.after_end, 0))


class StreamTable:
    """Stream ends of every request on this rank, keyed by (request, stream)."""

    def __init__(self) -> None:
        self.consumers: dict[tuple[int, str], ConsumerEnd] = {}
        self.producers: dict[tuple[int, str], ProducerEnd] = {}

    def consumer(self, request: int, spec: StreamSpec) -> ConsumerEnd:
        key = (request, spec.name)
        end = self.consumers.get(key)
        if end is None:
            end = self.consumers[key] = new_consumer(spec)
        return end

    def producer(self, request: int, stream: str) -> ProducerEnd:
        return self.producers.setdefault((request, stream), ProducerEnd())

    def receive(self, end: ConsumerEnd, source: int, items: list[Any]) -> None:
        for item in items:
            end.buffer.push(item)
            end.sources.append(source)

    def credits(self, end: ConsumerEnd, consumed_before: int) -> dict[int, int]:
        """Items newly consumed since `consumed_before`, counted per producing rank."""
        out: dict[int, int] = {}
        for _ in range(end.buffer.consumed - consumed_before):
            if end.sources:
                src = end.sources.popleft()
                out[src] = out.get(src, 0) + 1
        return out

    def drop(self, request: int) -> None:
        for key in [k for k in self.consumers if k[0] == request]:
            del self.consumers[key]
        for key in [k for k in self.producers if k[0] == request]:
            del self.producers[key]

    def count(self) -> int:
        return len(self.consumers) + len(self.producers)
