"""One stream of one request: items in, chunks out, as its chunk policy forms them.

A pure object over plain data (no threads, no sockets, no torch): the runtime
drives it from its transport and scheduler, the simulator from its round-robin.

- `push(item)` appends an item and says "full" when `capacity` items are now
  waiting unconsumed: the producer must pause (backpressure) until a chunk is
  taken. `capacity <= 0` means unbounded.
- `poll()` returns the next chunk if one is ready (a consumer walk fires per chunk).
- `pop()` is `recv`: a chunk, WAITING, or, once the stream is closed and every
  chunk taken, an empty item (None) for `after_end continue` or ENDED for `stop`.
- `close()` is the producer's end of stream; the final fragment (items after the
  last complete chunk) then follows `at_end`: flush delivers it as it is, pad
  fills it to full size with None items, drop discards it.
- `abandon()` is the consumer's end: no reader will ever come (its flow did not
  start, or finished), so items are dropped and the producer never blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from wgc.plan.model import StreamSpec
from wgc.semantics.stream_policy import ChunkPolicy, make_policy

AT_END = ("flush", "pad", "drop")
AFTER_END = ("stop", "continue")
PAD = None  # the pad item, and the empty item after the end


@dataclass(frozen=True)
class Chunk:
    value: Any  # a list of items, or the item itself for fixed(1); None for an empty item after the end
    index: int  # 0, 1, ...; -1 for an empty item after the end
    final: bool = False  # the end-of-stream fragment


class _Signal:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


WAITING = _Signal("WAITING")  # no chunk yet: the consumer blocks
ENDED = _Signal("ENDED")  # closed, drained, `after_end stop`: reading further is an error

PushStatus = Literal["ok", "full"]


class StreamBuffer:
    def __init__(self, policy: ChunkPolicy, at_end: str = "flush", after_end: str = "stop", capacity: int = 0) -> None:
        if at_end not in AT_END:
            raise ValueError(f"unknown at_end rule `{at_end}`")
        if after_end not in AFTER_END:
            raise ValueError(f"unknown after_end rule `{after_end}`")
        self.policy = policy
        self.at_end = at_end
        self.after_end = after_end
        self.capacity = capacity
        self.pushed = 0  # items received
        self.taken = 0  # chunks handed out (the end-of-stream fragment included)
        self.consumed = 0  # items before the end of the last chunk handed out
        self.closed = False
        self.abandoned = False
        self._fragment_settled = False
        self._items: list[Any] = []
        self._offset = 0  # stream position of _items[0]

    # ---- producer side ----------------------------------------------------------

    @property
    def pending(self) -> int:
        """Items received and not yet consumed by a chunk handed out."""
        return self.pushed - self.consumed

    @property
    def full(self) -> bool:
        return self.capacity > 0 and self.pending >= self.capacity and not self.abandoned

    def push(self, item: Any) -> PushStatus:
        if self.closed:
            raise ValueError("push to a closed stream")
        if self.abandoned:
            return "ok"
        self._items.append(item)
        self.pushed += 1
        return "full" if self.full else "ok"

    def close(self) -> None:
        self.closed = True

    def abandon(self) -> None:
        self.abandoned = True
        self._items.clear()
        self._offset = self.pushed

    # ---- consumer side -------------------------------------------------------------

    @property
    def drained(self) -> bool:
        """Closed, and no chunk will ever be ready again."""
        if self.abandoned:
            return self.closed
        if not self.closed or self.pushed >= self.policy.end(self.taken):
            return False
        return self._fragment_settled or self.at_end == "drop" or not self._has_fragment()

    def ready(self) -> bool:
        """A chunk (maybe the final fragment) can be taken now."""
        if self.pushed >= self.policy.end(self.taken):
            return True
        return self.closed and not self.drained

    def poll(self) -> Chunk | None:
        """The next chunk if it is ready (taking it), else None."""
        p, j = self.policy, self.taken
        if self.abandoned:
            return None
        if self.pushed >= p.end(j):
            return self._take(self._slice(p.start(j), p.end(j)), p.end(j))
        if not self.closed or self._fragment_settled:
            return None
        self._fragment_settled = True
        if not self._has_fragment() or self.at_end == "drop":
            self.consumed = self.pushed
            return None
        items = self._slice(p.start(j), self.pushed)
        if self.at_end == "pad":
            items.extend([PAD] * (p.end(j) - self.pushed))
        return self._take(items, self.pushed, final=True)

    def pop(self) -> Chunk | _Signal:
        """`recv`: the next chunk, WAITING, or after the end an empty item / ENDED."""
        chunk = self.poll()
        if chunk is not None:
            return chunk
        if not self.drained:
            return WAITING
        return Chunk(PAD, -1) if self.after_end == "continue" else ENDED

    # ---- internals -----------------------------------------------------------------

    def _has_fragment(self) -> bool:
        """Items after the last complete chunk (that the next chunk would start from)."""
        p, j = self.policy, self.taken
        last_end = p.end(j - 1) if j > 0 else 0
        return self.pushed > last_end and p.start(j) < self.pushed

    def _slice(self, start: int, end: int) -> list[Any]:
        return self._items[start - self._offset:end - self._offset]

    def _take(self, items: list[Any], consumed_to: int, final: bool = False) -> Chunk:
        value = items[0] if self.policy.unwrap and len(items) == 1 else items
        chunk = Chunk(value, self.taken, final)
        self.taken += 1
        self.consumed = max(self.consumed, consumed_to)
        self._trim()
        return chunk

    def _trim(self) -> None:
        """Forget items no future chunk can contain."""
        keep_from = min(self.policy.start(self.taken), self.pushed)
        drop = keep_from - self._offset
        if drop > 0 and drop * 2 >= len(self._items):
            del self._items[:drop]
            self._offset = keep_from


def buffer_for(spec: StreamSpec, capacity: int | None = None) -> StreamBuffer:
    """A fresh buffer for one request's stream `spec` (`capacity`: the spec's unless given)."""
    policy = make_policy(spec.policy, spec.policy_args)
    return StreamBuffer(policy, spec.at_end, spec.after_end, spec.capacity if capacity is None else capacity)
