"""A worker process's Outputs of one round, sent to the coordinator as one message.

A decode round of B requests emits B tokens; sent one message each, the worker encodes and sends B
messages and the coordinator process decodes B (about a millisecond a round at batch 32 on the llama
plan). Held until the round ends and sent as one `Outputs`, they cost one of each. The ends of
requests are held the same way (`FlowDone`, `StreamDone`, `Drained`): B requests that finish in one
round were B more sends behind B single-output flushes, each send waking ZeroMQ's I/O thread (a
quarter of the worker's sends at 64 tokens a request, and on a loaded host each wake-up a chance to
lose the core). Order is kept: the held messages leave in the order they were sent, and any other
message this rank sends (to the coordinator or to another rank) first sends what is held, so nothing
sent after an output can reach anyone before it (a Failed, or a message to a rank whose reply the
coordinator would see first).

When: the executor flushes what is held once a round's instances have advanced, before the round's
forward runs (`Executor.flush`): the tokens they emitted are the last forward's, and held until the
round's end they reached the coordinator one forward late.
"""

from __future__ import annotations

from collections.abc import Callable

from wgc.runtime.protocol.messages import COORDINATOR, Drained, FlowDone, Held, Message, Output, Outputs, StreamDone

# What waits for the round's end: the per-request traffic to the coordinator that nothing waits on
# inside the round (an Outputs carries exactly these, messages.Held)
HELD: frozenset[type] = frozenset({Output, FlowDone, StreamDone, Drained})


class OutBatch:
    """`send` in place of the socket send: holds Outputs and request ends to the coordinator until `flush`."""

    def __init__(self, rank: int, send: Callable[[int, Message], None]) -> None:
        self.rank = rank
        self._send = send  # the real send (sockets)
        self.held: list[Held] = []

    def send(self, destination: int, msg: Message) -> None:
        if destination == COORDINATOR and msg.__class__ in HELD:
            self.held.append(msg)  # type: ignore[arg-type]
            return
        if self.held and destination != self.rank:  # to itself stays in the process: nothing to overtake
            self.flush()
        self._send(destination, msg)

    def flush(self) -> None:
        """The messages held, as one Outputs (a lone one as itself)."""
        items, self.held = self.held, []
        if items:
            self._send(COORDINATOR, items[0] if len(items) == 1 else Outputs(items))
