"""Everything one rank holds for one request, in one object (nano-vllm's `Sequence`).

The executor keeps one RequestState per request (`Executor.states`), so that
forgetting a request is popping it: no table keyed by request can be left
behind. Rank-wide things stay on the executor: the ready deque (a dropped
request's instances in it are skipped, their `alive` is false), the ids of
ended requests, and the statistics.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from wgc.runtime.protocol.messages import FlowEnded, RequestInit
from wgc.runtime.worker.instance import Instance
from wgc.runtime.worker.streams import ConsumerEnd, ProducerEnd, new_consumer

from wgc.plan.model import StreamSpec

MailKey = tuple[str, str]  # (instance key, tag)


@dataclass(eq=False)
class RequestState:
    request: int
    # None until the RequestInit arrives: a worker's InitGate holds everything else until it has, and
    # the in-process cluster delivers in one order, but a state is made by whichever message comes first.
    init: RequestInit | None = None
    instances: dict[str, Instance] = field(default_factory=dict)  # by instance key; queued ones too
    # The next value of each (instance, tag); values that came while an earlier one of the same tag was
    # still unreceived (a loop's SEND that ran ahead of its RECV) wait FIFO behind it. Usually empty.
    mailbox: dict[MailKey, Any] = field(default_factory=dict)
    mailbox_more: dict[MailKey, deque[Any]] = field(default_factory=dict)
    # Instances of one flow run on a rank in the flow's order (by `prior`), one at a time; how many
    # finished here; and the flows that ended (FlowEnded), waiting for this rank to finish theirs.
    flow_queue: dict[str, list[Instance]] = field(default_factory=dict)
    flow_finished: dict[str, int] = field(default_factory=dict)
    flow_ends: dict[str, FlowEnded] = field(default_factory=dict)
    # Stream consumer walks on a rank other than the stream's consumer rank (RankPlan.other_consumers),
    # by stream: their instances, run one at a time in chunk order like a flow's; how many finished;
    # and, once the consumer rank says how many there were (ConsumersEnded), that number.
    consumer_queue: dict[str, list[Instance]] = field(default_factory=dict)
    consumers_finished: dict[str, int] = field(default_factory=dict)
    consumer_ends: dict[str, int] = field(default_factory=dict)
    # Stream ends on this rank, by stream; and whether a stream has a reader for this request (every
    # PUSH asks, and the answer cannot change: decided once).
    producers: dict[str, ProducerEnd] = field(default_factory=dict)
    consumers: dict[str, ConsumerEnd] = field(default_factory=dict)
    has_reader: dict[str, bool] = field(default_factory=dict)
    output_seq: int = 0  # the sequence number of this rank's next Output

    # ---- mailbox ------------------------------------------------------------------------

    def deliver(self, key: MailKey, value: Any) -> None:
        if key in self.mailbox:
            self.mailbox_more.setdefault(key, deque()).append(value)
        else:
            self.mailbox[key] = value

    def take(self, key: MailKey) -> Any:
        """The next value for a RECV (the caller checked that there is one)."""
        value = self.mailbox.pop(key)
        if self.mailbox_more:
            more = self.mailbox_more.get(key)
            if more:
                self.mailbox[key] = more.popleft()
                if not more:
                    del self.mailbox_more[key]
        return value

    def mail_count(self) -> int:
        return len(self.mailbox) + sum(len(q) for q in self.mailbox_more.values())

    # ---- streams ------------------------------------------------------------------------

    def consumer(self, spec: StreamSpec) -> ConsumerEnd:
        end = self.consumers.get(spec.name)
        if end is None:
            end = self.consumers[spec.name] = new_consumer(spec)
        return end

    def producer(self, stream: str) -> ProducerEnd:
        end = self.producers.get(stream)
        if end is None:
            end = self.producers[stream] = ProducerEnd()
        return end

    # ---- outputs ------------------------------------------------------------------------

    def next_output_seq(self) -> int:
        seq = self.output_seq
        self.output_seq = seq + 1
        return seq
