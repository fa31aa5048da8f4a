"""HealthQuery round trips to workers, matched to their Health replies.

A worker answers queries in the order it receives them and its messages to
the coordinator stay in order, so the n-th Health from a rank answers the n-th
query sent to it. A reply also proves that everything the rank sent before it
has arrived, which makes a probe of every rank a barrier (see coordinator.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from wgc.runtime.protocol.messages import Health

Reply = Callable[[int, "dict[str, int] | None"], None]  # (rank, counters); None when the rank went down


class Probes:
    def __init__(self, ask: Callable[[int, bool], None]) -> None:
        self._ask = ask  # sends a HealthQuery to a rank: (rank, whether it reports its counters)
        self._waiting: dict[int, deque[Reply]] = {}
        self._down: set[int] = set()

    def ask(self, rank: int, reply: Reply, counters: bool = True) -> None:
        if rank in self._down:
            reply(rank, None)
            return
        self._waiting.setdefault(rank, deque()).append(reply)
        self._ask(rank, counters)

    def ask_all(self, ranks: Iterable[int], done: Callable[[dict[int, dict[str, int] | None]], None]) -> None:
        """Probe every rank in `ranks` as a barrier; `done` gets every reply once the last one is in, each
        an empty dict (a barrier asks for no counters) or None for a rank that went down."""
        remaining = set(ranks)
        replies: dict[int, dict[str, int] | None] = {}
        if not remaining:
            done(replies)
            return

        def reply(rank: int, counters: dict[str, int] | None) -> None:
            replies[rank] = counters
            remaining.discard(rank)
            if not remaining:
                done(replies)

        for rank in sorted(remaining):
            self.ask(rank, reply, counters=False)

    def answer(self, msg: Health) -> None:
        queue = self._waiting.get(msg.rank)
        if queue:
            queue.popleft()(msg.rank, msg.counters)

    def rank_down(self, rank: int) -> None:
        self._down.add(rank)
        for reply in self._waiting.pop(rank, deque()):
            reply(rank, None)

    def pending(self) -> int:
        return sum(len(q) for q in self._waiting.values())
