"""One rank's executor: interprets its schedules for every active (request, walk) and batches their RUNs.

Pure with respect to I/O: messages come in through `handle`, go out through
the `send(destination, message)` callback (destination: a rank, or
COORDINATOR), and `run()` makes all the progress that is possible without new
messages. The worker process wraps it with sockets; tests drive several
executors in one thread.

Scheduling: every instance runs until it reaches a RUN, blocks, or ends; then
all RUNs waiting on the same component entry are executed as one batched call
(up to the component's max batch), across requests and fused lanes. Requests
join and leave at these boundaries: continuous batching.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wgc.runtime.component import Call, Component
from wgc.runtime.messages import (
    Cancel,
    CancelAck,
    ConsumersEnded,
    Data,
    Drained,
    Failed,
    FlowDone,
    FlowEnded,
    Health,
    HealthQuery,
    KvData,
    Message,
    RequestInit,
    StartWalk,
    StreamCredit,
    StreamItems,
)
from wgc.runtime.worker.context import RankPlan
from wgc.runtime.worker.instance import Instance
from wgc.runtime.worker.interpret import Interpreter, StepError
from wgc.runtime.worker.streams import StreamTable

from wgc.plan.model import Plan, Run

COORDINATOR = -1
DEAD_REMEMBERED = 100_000  # ended requests whose stray messages are recognised and dropped
Send = Callable[[int, Message], None]


@dataclass
class Options:
    fake_inputs: bool = False  # missing named inputs get mock values (fake components, simulator parity)


class Executor:
    def __init__(self, plan: Plan, rank: int, components: dict[str, Component], send: Send,
                 options: Options | None = None) -> None:
        self.rp = RankPlan.build(plan, rank)
        self.rank = rank
        self.components = components
        self.send = send
        self.options = options or Options()
        self.requests: dict[int, RequestInit] = {}
        self.instances: dict[tuple[int, str], Instance] = {}
        self.ready: deque[Instance] = deque()
        self.mailbox: dict[tuple[int, str, str], Any] = {}  # (request, instance, tag) → the next value
        # Values that came while an earlier one of the same tag was still unreceived (a loop's SEND that
        # ran ahead of its RECV): FIFO behind the mailbox's, so nothing is overwritten. Usually empty.
        self.mailbox_more: dict[tuple[int, str, str], deque[Any]] = {}
        # Instances of one flow run on a rank in the flow's order (by `prior`), one at a time.
        self.flow_queue: dict[tuple[int, str], list[Instance]] = {}
        self.flow_finished: dict[tuple[int, str], int] = {}  # flow instances finished here, per (request, flow)
        # Flows that ended (FlowEnded), waiting for this rank to finish their instances, per (request, flow).
        self.flow_ends: dict[tuple[int, str], FlowEnded] = {}
        # Stream consumer walks on a rank other than the stream's consumer rank (RankPlan.other_consumers),
        # per (request, stream): their instances, run one at a time in chunk order like a flow's; how many
        # finished; and, once the consumer rank says how many there were (ConsumersEnded), that number.
        self.consumer_queue: dict[tuple[int, str], list[Instance]] = {}
        self.consumers_finished: dict[tuple[int, str], int] = {}
        self.consumer_ends: dict[tuple[int, str], int] = {}
        self.streams = StreamTable()
        # Cancelled, failed or finished requests: late messages for them are dropped. Bounded: ids are
        # never reused, and a message can only be late by so much.
        self.dead: set[int] = set()
        self._dead_order: deque[int] = deque()
        self.interp = Interpreter(self)
        self.output_seq: dict[int, int] = {}
        self.stats = {"runs": 0, "batched_calls": 0, "messages_in": 0, "messages_out": 0}
        # Per component entry: batched calls, items in them, microseconds spent inside the component.
        self.entry_stats: dict[tuple[str, str], list[int]] = {}

    # ---- inbound ----------------------------------------------------------------------

    def handle(self, msg: Message) -> None:
        self.stats["messages_in"] += 1
        request = getattr(msg, "request", None)
        if request is not None and request in self.dead:
            return
        handler = getattr(self, "_on_" + type(msg).__name__.lower(), None)
        if handler is None:
            raise ValueError(f"rank {self.rank} cannot handle {type(msg).__name__}")
        handler(msg)

    def _on_requestinit(self, msg: RequestInit) -> None:
        self.requests[msg.request] = msg

    def _on_startwalk(self, msg: StartWalk) -> None:
        self.start(msg.request, msg.instance, msg.walk, msg.inputs, msg.flow, msg.prior)

    def _on_data(self, msg: Data) -> None:
        self._deliver((msg.request, msg.instance, msg.tag), msg.value)
        self._wake(msg.request, msg.instance, ("recv", msg.tag))

    def _on_kvdata(self, msg: KvData) -> None:
        self._deliver((msg.request, msg.instance, msg.tag), msg.state)
        self._wake(msg.request, msg.instance, ("recv", msg.tag))

    def _deliver(self, key: tuple[int, str, str], value: Any) -> None:
        if key in self.mailbox:
            self.mailbox_more.setdefault(key, deque()).append(value)
        else:
            self.mailbox[key] = value

    def take(self, key: tuple[int, str, str]) -> Any:
        """The next value for a RECV (the caller checked that there is one)."""
        value = self.mailbox.pop(key)
        if self.mailbox_more:
            more = self.mailbox_more.get(key)
            if more:
                self.mailbox[key] = more.popleft()
                if not more:
                    del self.mailbox_more[key]
        return value

    def _on_streamitems(self, msg: StreamItems) -> None:
        self.interp.stream_items(msg)

    def _on_streamcredit(self, msg: StreamCredit) -> None:
        end = self.streams.producer(msg.request, msg.stream)
        end.in_flight = max(0, end.in_flight - msg.n)
        for inst in self._live(msg.request):
            if inst.waiting == ("credit", msg.stream):
                self._make_ready(inst)

    def _on_flowended(self, msg: FlowEnded) -> None:
        self.flow_ends[(msg.request, msg.flow)] = msg
        self._flow_end_check((msg.request, msg.flow))

    def _on_consumersended(self, msg: ConsumersEnded) -> None:
        self.consumer_ends[(msg.request, msg.stream)] = msg.walks
        self._consumers_end_check((msg.request, msg.stream))

    def _on_cancel(self, msg: Cancel) -> None:
        self.drop_request(msg.request)
        if msg.reason != "done":
            self.send(COORDINATOR, CancelAck(msg.request, self.rank))

    def _on_healthquery(self, msg: HealthQuery) -> None:
        self.send(COORDINATOR, Health(self.rank, self.counters()))

    # ---- instances ----------------------------------------------------------------------

    def start(self, request: int, key: str, walk: str, inputs: dict[str, Any], flow, prior: int = 0) -> None:
        schedule = self.rp.code.get(walk)
        if schedule is None or request in self.dead:
            return
        inst = Instance(request, key, walk, schedule.instructions, flow, dict(inputs), prior=prior)
        self.instances[(request, key)] = inst
        if flow is None:
            stream = self.rp.other_consumers.get(walk) if self.rp.other_consumers else None
            if stream is None:
                self._make_ready(inst)
                return
            queue = self.consumer_queue.setdefault((request, stream), [])
            queue.append(inst)
            queue.sort(key=lambda i: i.prior)
            self._admit_head(queue, self.consumers_finished.get((request, stream), 0))
            return
        queue = self.flow_queue.setdefault((request, flow.flow), [])
        queue.append(inst)
        queue.sort(key=lambda i: i.prior)
        self._start_flow_head(request, flow.flow)

    def _start_flow_head(self, request: int, flow: str) -> None:
        queue = self.flow_queue.get((request, flow))
        if queue:
            self._admit_head(queue, self.flow_finished.get((request, flow), 0))

    def _admit_head(self, queue: list[Instance], finished: int) -> None:
        """Start the first instance of an ordered queue once every instance before it has finished."""
        if not queue[0].admitted and queue[0].prior == finished:
            queue[0].admitted = True
            self._make_ready(queue[0])

    def _make_ready(self, inst: Instance) -> None:
        inst.waiting = None
        if not inst.dispatched:
            self.ready.append(inst)

    def _wake(self, request: int, key: str, reason: tuple[str, ...]) -> None:
        inst = self.instances.get((request, key))
        if inst is not None and inst.waiting == reason:
            self._make_ready(inst)

    def _live(self, request: int) -> list[Instance]:
        return [i for (r, _), i in self.instances.items() if r == request]

    def finish(self, inst: Instance) -> None:
        inst.alive = False
        self.instances.pop((inst.request, inst.key), None)
        if inst.flow is None:
            self.interp.consumer_finished(inst)
            stream = self.rp.other_consumers.get(inst.walk) if self.rp.other_consumers else None
            if stream is not None:
                self._other_consumer_finished((inst.request, stream), inst)
            return
        key = (inst.request, inst.flow.flow)
        queue = self.flow_queue.get(key)
        if queue and queue[0] is inst:
            queue.pop(0)
            self.flow_finished[key] = self.flow_finished.get(key, 0) + 1
            if queue:
                self._start_flow_head(*key)
            else:
                del self.flow_queue[key]
            if self.flow_ends:
                self._flow_end_check(key)

    def _flow_end_check(self, key: tuple[int, str]) -> None:
        """An ended flow whose instances have all finished here: close its streams behind this rank's
        items, and tell the coordinator when it waits for this rank's outputs."""
        end = self.flow_ends.get(key)
        if end is None or self.flow_finished.get(key, 0) < end.walks:
            return
        del self.flow_ends[key]
        self.interp.close_streams(end.request, end.flow)
        if end.report:
            self.send(COORDINATOR, Drained(end.request, self.rank, flow=end.flow))

    def _other_consumer_finished(self, key: tuple[int, str], inst: Instance) -> None:
        finished = self.consumers_finished[key] = self.consumers_finished.get(key, 0) + 1
        queue = self.consumer_queue.get(key)
        if queue and queue[0] is inst:
            queue.pop(0)
            if queue:
                self._admit_head(queue, finished)
            else:
                del self.consumer_queue[key]
        self._consumers_end_check(key)

    def _consumers_end_check(self, key: tuple[int, str]) -> None:
        walks = self.consumer_ends.get(key)
        if walks is not None and self.consumers_finished.get(key, 0) >= walks:
            del self.consumer_ends[key]
            self.send(COORDINATOR, Drained(key[0], self.rank, stream=key[1]))

    def fail(self, request: int, error: str) -> None:
        self.send(COORDINATOR, Failed(request, self.rank, error))
        self.drop_request(request)

    def drop_request(self, request: int) -> None:
        """Forget everything of a request on this rank: instances, messages, stream ends, component state."""
        if request not in self.dead:
            self.dead.add(request)
            self._dead_order.append(request)
            if len(self._dead_order) > DEAD_REMEMBERED:
                self.dead.discard(self._dead_order.popleft())
        self.requests.pop(request, None)
        for key in [k for k in self.instances if k[0] == request]:
            self.instances.pop(key).alive = False
        self.ready = deque(i for i in self.ready if i.request != request)
        for table in (self.mailbox, self.mailbox_more, self.flow_queue, self.flow_finished, self.flow_ends,
                      self.consumer_queue, self.consumers_finished, self.consumer_ends):
            if table:
                for key in [k for k in table if k[0] == request]:
                    del table[key]
        self.streams.drop(request)
        self.interp.forget(request)
        self.output_seq.pop(request, None)
        for comp in self.components.values():
            comp.release(request)

    # ---- progress ------------------------------------------------------------------------

    def run(self, max_rounds: int | None = None) -> None:
        """Run until every instance is blocked on a message or finished, or for `max_rounds` rounds of
        batched calls (the caller then reads its messages — cancels, probes, new requests — and runs again)."""
        advance = self.interp.advance
        rounds = 0
        while self.ready and (max_rounds is None or rounds < max_rounds):
            rounds += 1
            batches: dict[tuple[str, str], list[Instance]] = {}
            while self.ready:
                inst = self.ready.popleft()
                if not inst.alive:
                    continue
                try:
                    status = advance(inst)
                except StepError as err:
                    self.fail(inst.request, str(err))
                    continue
                except Exception as err:  # noqa: BLE001 - one request's failure must not take the rank down
                    self.fail(inst.request, f"rank {self.rank}, walk {inst.walk}, instruction {inst.pc}: "
                                            f"{type(err).__name__}: {err}")
                    continue
                if status is None:
                    self.finish(inst)
                elif status.__class__ is Run:
                    inst.dispatched = True
                    group = batches.get((status.component, status.entry))
                    if group is None:
                        batches[(status.component, status.entry)] = [inst]
                    else:
                        group.append(inst)
                else:
                    inst.waiting = status.reason
            for (component, entry), group in batches.items():
                self._dispatch(component, entry, group)

    def _dispatch(self, component: str, entry: str, group: list[Instance]) -> None:
        comp = self.components[component]
        limit = int(comp.spec.settings.get("max_batch", 0) or 0) or len(group)
        calls: list[Call] = []
        targets: list[tuple[Instance, str]] = []  # where each call's result goes
        getters_of = self.interp.arg_getters
        last: Run | None = None
        lanes: list[tuple] = []
        for inst in group:
            ins = inst.code[inst.pc]
            if ins is not last:  # a batch is usually one instruction of one walk: look its lanes up once
                last = ins
                lanes = list(zip(getters_of(ins), ins.labels, ins.outputs))
            try:
                for getters, label, out in lanes:
                    if inst.pending:
                        self.interp.before_call(inst, comp, label)
                    calls.append(Call(inst.request, label, tuple([g(inst) for g in getters])))
                    targets.append((inst, out))
            except KeyError as err:
                self.fail(inst.request, str(self.interp.missing_value(inst, err.args[0])))
        totals = self.entry_stats.setdefault((component, entry), [0, 0, 0])
        for start in range(0, len(calls), max(1, limit)):
            began = time.perf_counter()
            try:
                results = comp.call(entry, calls[start:start + limit])
            except Exception as err:  # noqa: BLE001 - a component failure fails its requests, not the rank
                for req in {c.request for c in calls[start:start + limit]}:
                    self.fail(req, f"rank {self.rank}: {component}.{entry} raised {type(err).__name__}: {err}")
                continue
            self.stats["batched_calls"] += 1
            self.stats["runs"] += len(results)
            totals[0] += 1
            totals[1] += len(results)
            totals[2] += int((time.perf_counter() - began) * 1e6)
            for (inst, out), value in zip(targets[start:start + limit], results):
                if out:
                    inst.frame[out] = value
        ready = self.ready
        for inst in group:
            inst.dispatched = False
            if inst.alive:
                inst.pc += 1
                ready.append(inst)

    # ---- outbound ------------------------------------------------------------------------

    def post(self, destination: int, msg: Message) -> None:
        """Deliver to another rank, or to this one without a socket."""
        self.stats["messages_out"] += 1
        if destination == self.rank:
            self.handle(msg)
        else:
            self.send(destination, msg)

    def next_output_seq(self, request: int) -> int:
        seq = self.output_seq.get(request, 0)
        self.output_seq[request] = seq + 1
        return seq

    def flow_done(self, request: int, flow: str, on_rank: dict[int, int]) -> None:
        """The flow's last walk ran NEXT here. `on_rank`: how many of the flow's walk instances each rank got.

        The coordinator must not end the request on this FlowDone alone: another rank of the flow's walks
        may still be running them and emitting (NEXT does not wait for a walk's other ranks), and its
        Outputs travel on its own socket, which nothing orders against this one. So every other rank that
        emits in the flow's walks, and ran any, reports `Drained` once it has finished them; this rank's
        own outputs are already ahead of the FlowDone (NEXT is the last instruction of its schedule, and
        its earlier walks of the flow finished before this one started)."""
        drains = [r for r in self.rp.flow_emitters.get(flow, ()) if r != self.rank and on_rank.get(r, 0)]
        self.send(COORDINATOR, FlowDone(request, flow, drains))
        for r in sorted(set(self.rp.flow_producers.get(flow, ())).union(drains)):
            self.post(r, FlowEnded(request, flow, on_rank.get(r, 0), r in drains))

    def counters(self) -> dict[str, int]:
        out = {
            "instances": len(self.instances),
            "requests": len(self.requests),
            "mailbox": len(self.mailbox) + sum(len(q) for q in self.mailbox_more.values()),
            "stream_ends": self.streams.count(),
            **self.stats,
        }
        for name, comp in self.components.items():
            for key, value in comp.counters().items():
                out[f"{name}.{key}"] = value
        for (component, entry), (calls, items, micros) in self.entry_stats.items():
            out[f"{component}.{entry}.calls"] = calls
            out[f"{component}.{entry}.items"] = items
            out[f"{component}.{entry}.compute_us"] = micros
        return out
