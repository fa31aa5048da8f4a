"""A worker holds a request's messages until the request's RequestInit has arrived.

The coordinator sends RequestInit to every rank before anything else of the
request, but another rank may get its own copy first and send on (a StartWalk,
Data, stream items): ZeroMQ orders the messages of each sender, not across
senders. The in-process cluster delivers in one global order and never shows
this; the gate restores "RequestInit first" per request.
"""

from __future__ import annotations

from wgc.runtime.protocol.messages import Cancel, Message, RequestInit
from wgc.runtime.worker.executor import Executor


class InitGate:
    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.held: dict[int, list[Message]] = {}

    def deliver(self, msg: Message) -> None:
        request = getattr(msg, "request", None)
        ex = self.executor
        if request is None or ex.initialised(request) or request in ex.dead:
            ex.handle(msg)
        elif isinstance(msg, RequestInit):
            ex.handle(msg)
            for held in self.held.pop(request, []):
                ex.handle(held)
        elif isinstance(msg, Cancel):
            self.held.pop(request, None)
            ex.handle(msg)
        else:
            self.held.setdefault(request, []).append(msg)

    def count(self) -> int:
        return sum(len(v) for v in self.held.values())
