"""A worker process's Outputs of one round, sent to the coordinator as one message.

A decode round of B requests emits B tokens; sent one message each, the worker encodes and sends B
messages and the coordinator process decodes B (about a millisecond a round at batch 32 on the llama
plan). Held until the round ends and sent as one `Outputs`, they cost one of each. Order is kept: any
other message this rank sends (to the coordinator or to another rank) first sends the Outputs held, so
nothing sent after an output can reach anyone before it (a Drained, a FlowDone, or a message to a rank
whose reply the coordinator would see first).
"""

from __future__ import annotations

from collections.abc import Callable

from wgc.runtime.protocol.messages import COORDINATOR, Message, Output, Outputs


class OutBatch:
    """`send` in place of the socket send: holds Outputs to the coordinator until `flush`."""

    def __init__(self, rank: int, send: Callable[[int, Message], None]) -> None:
        self.rank = rank
        self._send = send  # the real send (sockets)
        self.held: list[Output] = []

    def send(self, destination: int, msg: Message) -> None:
        if destination == COORDINATOR and msg.__class__ is Output:
            self.held.append(msg)  # type: ignore[arg-type]
            return
        if self.held and destination != self.rank:  # to itself stays in the process: nothing to overtake
            self.flush()
        self._send(destination, msg)

    def flush(self) -> None:
        """The Outputs held, as one message (a lone one as itself)."""
        items, self.held = self.held, []
        if items:
            self._send(COORDINATOR, items[0] if len(items) == 1 else Outputs(items))
