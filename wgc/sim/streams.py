"""The streams of one request: when they close, and when nobody will read them (shared by both interpreters).

A stream closes as soon as no item can arrive any more: no instance of a walk
that pushes to it is running, no unfinished flow can still start one, and no
stream whose consumer walk pushes to it can still fire. Closing one stream may
close the next (a chain of consumer walks), so `settle` repeats to a fixpoint.

A stream read by `recv` is abandoned when no walk that reads it is running and
no unfinished flow can start one (the reading flow did not start, or it has
finished): its items are dropped, so a bounded stream never blocks its
producer for a reader that will not come. A stream with a consumer walk is
always read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from wgc.plan.model import StreamSpec
from wgc.semantics.flows import FlowCursor
from wgc.semantics.stream_buffer import buffer_for


class StreamBoard:
    def __init__(self, specs: Sequence[StreamSpec], producers: Mapping[str, set[str]],
                 readers: Mapping[str, set[str]]) -> None:
        self.specs = {s.name: s for s in specs}
        self.buffers = {s.name: buffer_for(s) for s in specs}
        self.producers = producers  # stream → walks with a push to it
        self.readers = readers  # stream → walks with a recv (pop) of it
        self.fed_by = {s.consumer_walk: s.name for s in specs if s.consumer_walk}  # consumer walk → its stream

    def consumers(self) -> list[tuple[str, str]]:
        """(stream, consumer walk) for streams whose chunks fire a walk."""
        return [(s.name, s.consumer_walk) for s in self.specs.values() if s.consumer_walk]

    def settle(self, running: Mapping[str, int], cursors: Sequence[FlowCursor]) -> bool:
        """Close every stream that can get no more items, abandon those nobody will read; True on a change."""
        changed = False
        for name, buf in self.buffers.items():
            spec = self.specs[name]
            if not buf.abandoned and spec.consumer_walk is None and not self._may_run(
                    self.readers.get(name, set()), running, cursors):
                buf.abandon()
                changed = True
        progress = True
        while progress:
            progress = False
            for name, buf in self.buffers.items():
                if not buf.closed and not self._may_grow(name, running, cursors):
                    buf.close()
                    progress = changed = True
        return changed

    def _may_grow(self, name: str, running: Mapping[str, int], cursors: Sequence[FlowCursor]) -> bool:
        walks = self.producers.get(name, set())
        for w in walks:
            if running.get(w, 0) > 0:
                return True
            source = self.fed_by.get(w)
            if source is not None and not self.buffers[source].drained:
                return True
        return any(c.may_run(walks) for c in cursors)

    @staticmethod
    def _may_run(walks: set[str], running: Mapping[str, int], cursors: Sequence[FlowCursor]) -> bool:
        return any(running.get(w, 0) > 0 for w in walks) or any(c.may_run(walks) for c in cursors)
