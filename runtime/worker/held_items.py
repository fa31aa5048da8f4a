"""Stream items a producer rank holds back until its consumer can form a chunk with them.

Why: every `send tok -> codes` was one StreamItems message to the consumer's rank, and Orpheus's
language model sends a token a step to the codec's rank, whose sliding(window=28, stride=7)
consumer can fire only at every seventh. Six of seven messages (an encode and a ZeroMQ send each
on the producer's step, a receive and a decode on the consumer's) reached a rank that could do
nothing with them yet.

What is held: the items of a stream whose only producer rank is this one and whose consumer is on
another rank, from the push after one that completed a chunk at the consumer (`ChunkPolicy.
complete` of the items pushed so far: with one producer that is what the consumer holds) up to the
push that completes the next. They leave as one StreamItems per (request, stream), in push order:
- with the push that completes a chunk (that stream's items; the others stay held);
- before this rank sends any other message, to anyone, so nothing sent after an item overtakes it
  (the stream's close, a FlowEnded, a credit, an output, a failure).
A request this rank drops (cancelled, failed) takes its held items with it: none is sent.

Nothing else can need them: until they complete a chunk the consumer cannot fire on them, and a
stream's end (`at_end flush` delivers a last partial chunk) is a message of its own, which sends
them first. Nor can a push blocked on credits be waiting for them: every item sent is consumed once
the consumer has taken the chunks sent (taking a chunk consumes every item before its end), and
what is held is fewer than one chunk's items (the first chunk's before it, a stride's after it, and
a stride is at most a window: E019), so a block only held items could end needs a capacity below
one chunk, which the checker rejects (E019; P021 in a placement). So a consumer fires when it would
have: only the messages that could not make it fire are merged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wgc.runtime.protocol.messages import Message, StreamItems

Send = Callable[[int, Message], None]
Key = tuple[int, int, str]  # (consumer rank, request, stream)


class HeldItems:
    """`send` in place of the executor's: what is held leaves first."""

    def __init__(self, rank: int, send: Send) -> None:
        self.rank = rank
        self._send = send
        self.held: dict[Key, list[Any]] = {}  # insertion order: the order of each key's first held item
        self.messages = 0  # StreamItems sent
        self.items = 0  # items in them

    def push(self, destination: int, request: int, stream: str, item: Any, completes: bool) -> None:
        """One pushed item: held, or sent with what its stream holds when it completes a chunk."""
        key = (destination, request, stream)
        items = self.held.pop(key, []) if completes else self.held.setdefault(key, [])
        items.append(item)
        if completes:
            self._items(destination, request, stream, items)

    def release(self) -> None:
        """Send everything held."""
        if self.held:
            held, self.held = self.held, {}
            for (destination, request, stream), items in held.items():
                self._items(destination, request, stream, items)

    def drop(self, request: int) -> None:
        """Forget a dropped request's items (cancelled or failed): its consumer has dropped it too,
        and would only discard them, so sending them with this rank's next message is wasted."""
        if self.held:
            self.held = {key: items for key, items in self.held.items() if key[1] != request}

    def _items(self, destination: int, request: int, stream: str, items: list[Any]) -> None:
        self.messages += 1
        self.items += len(items)
        self._send(destination, StreamItems(request, stream, self.rank, items))

    def send(self, destination: int, msg: Message) -> None:
        if self.held:
            self.release()
        self._send(destination, msg)
