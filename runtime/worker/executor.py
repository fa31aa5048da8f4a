"""One rank's executor: interprets its schedules for every active (request, walk) and batches their RUNs.

Pure with respect to I/O: messages come in through `handle`, go out through
the `send(destination, message)` callback (destination: a rank, or
COORDINATOR), and `run()` makes all the progress that is possible without new
messages. The worker process wraps it with sockets; tests drive several
executors in one thread.

Scheduling: every instance runs until it reaches a RUN, blocks, or ends; then
all RUNs waiting on the same component entry are executed as one batched call
(up to the component's max batch), across requests and fused lanes. Requests
join and leave at these boundaries: continuous batching. In a loop of several
RUNs, instances start their iterations together (lockstep.py), so that a
request arriving mid-way shares the running ones' batches.

State: everything of one request on this rank is one RequestState
(request_state.py) in `states`; forgetting a request is popping it and
releasing its component state. Only the ready deque, the ids of ended requests
and the statistics are rank-wide.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wgc.runtime.components.base import Component
from wgc.runtime.process.heap import gc_counters
from wgc.runtime.protocol.messages import (
    COORDINATOR,
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
    Shutdown,
    StartWalk,
    StreamCredit,
    StreamItems,
    ToWorker,
    TpBatch,
    check_handlers,
)
from wgc.runtime.worker.batching import Batcher
from wgc.runtime.worker.context import RankPlan
from wgc.runtime.worker.held_items import HeldItems
from wgc.runtime.worker.instance import Instance
from wgc.runtime.worker.interpret import Interpreter, StepError
from wgc.runtime.worker.lockstep import Lockstep
from wgc.runtime.worker.mixed import dispatch_mixed
from wgc.runtime.worker.request_state import RequestState
from wgc.runtime.worker.tp_agree import TpAgreement

from wgc.plan.model import Plan, Run

DEAD_REMEMBERED = 100_000  # ended requests whose stray messages are recognised and dropped
Send = Callable[[int, Message], None]


@dataclass
class Options:
    fake_inputs: bool = False  # missing named inputs get mock values (fake components, simulator parity)


class Executor:
    def __init__(self, plan: Plan, rank: int, components: dict[str, Component], send: Send,
                 options: Options | None = None, flush: Callable[[], None] | None = None) -> None:
        self.rp = RankPlan.build(plan, rank)
        self.rank = rank
        self.components = components
        # Stream items that cannot complete a chunk at their consumer yet wait here (held_items.py);
        # every other message goes through its `send`, which sends them first. A rank that holds no
        # stream's items sends directly: one call less a message (runtime_overhead.py saw it).
        self.held = HeldItems(rank, send)
        self.send = self.held.send if self.rp.held_streams else send
        # Sends what `send` holds back (a worker's OutBatch): called once a round's instances have
        # advanced, before its batches run, so the outputs they emitted (the tokens of the last
        # forward) leave now instead of after this round's forward.
        self.flush = flush
        self.options = options or Options()
        self.states: dict[int, RequestState] = {}  # every request this rank holds anything of
        # Instances that may run, of every request; a dropped request's are skipped (`alive` false).
        self.ready: deque[Instance] = deque()
        self.deferred: list[Instance] = []  # at a RUN the scheduler put off (batching.py); retried later
        # Cancelled, failed or finished requests: late messages for them are dropped. Bounded: ids are
        # never reused, and a message can only be late by so much.
        self.dead: set[int] = set()
        self._dead_order: deque[int] = deque()
        self.interp = Interpreter(self)
        self.failures = 0  # requests failed here so far (a batch checks whether one of its own did)
        self.batcher = Batcher(self)
        self.lockstep = Lockstep(ws.instructions for ws in self.rp.code.values())  # iterations in step (lockstep.py)
        self.tp = TpAgreement(plan, rank, self.dead)  # a TP copy's ranks run the same batches (tp_agree.py)
        self.stats = {"runs": 0, "batched_calls": 0, "messages_in": 0, "messages_out": 0}
        # Per component entry: batched calls, items in them, microseconds spent inside the component.
        self.entry_stats: dict[tuple[str, str], list[int]] = {}

    # ---- inbound ----------------------------------------------------------------------

    def handle(self, msg: Message) -> None:
        self.stats["messages_in"] += 1
        request = getattr(msg, "request", None)
        if request is not None and request in self.dead:
            return
        handler = HANDLERS.get(type(msg))
        if handler is None:
            raise ValueError(f"rank {self.rank} cannot handle {type(msg).__name__}")
        handler(self, msg)

    def state(self, request: int) -> RequestState:
        """The request's state here, made by its first message (normally its RequestInit)."""
        state = self.states.get(request)
        if state is None:
            state = self.states[request] = RequestState(request)
        return state

    def initialised(self, request: int) -> bool:
        """Its RequestInit has arrived (the InitGate holds its other messages until then)."""
        state = self.states.get(request)
        return state is not None and state.init is not None

    def _on_requestinit(self, msg: RequestInit) -> None:
        self.state(msg.request).init = msg

    def _on_startwalk(self, msg: StartWalk) -> None:
        self.start(msg.request, msg.instance, msg.walk, msg.inputs, msg.flow, msg.prior)

    def _on_data(self, msg: Data) -> None:
        state = self.state(msg.request)
        state.deliver((msg.instance, msg.tag), msg.value)
        self._wake(state, msg.instance, ("recv", msg.tag))

    def _on_kvdata(self, msg: KvData) -> None:
        state = self.state(msg.request)
        state.deliver((msg.instance, msg.tag), msg.state)
        self._wake(state, msg.instance, ("recv", msg.tag))

    def _on_streamitems(self, msg: StreamItems) -> None:
        self.interp.stream_items(msg)

    def _on_streamcredit(self, msg: StreamCredit) -> None:
        state = self.state(msg.request)
        end = state.producer(msg.stream)
        end.in_flight = max(0, end.in_flight - msg.n)
        for inst in state.instances.values():
            if inst.waiting == ("credit", msg.stream):
                self.make_ready(inst)

    def _on_flowended(self, msg: FlowEnded) -> None:
        state = self.state(msg.request)
        state.flow_ends[msg.flow] = msg
        self._flow_end_check(state, msg.flow)

    def _on_consumersended(self, msg: ConsumersEnded) -> None:
        state = self.state(msg.request)
        state.consumer_ends[msg.stream] = msg.walks
        self._consumers_end_check(state, msg.stream)

    def _on_cancel(self, msg: Cancel) -> None:
        if not self.tp.end(msg.request, msg.reason, self.post):  # a TP follower waits for its leaders' release
            self._cancelled(msg.request, msg.reason)

    def _cancelled(self, request: int, reason: str) -> None:
        self.drop_request(request)
        if reason != "done":
            self.send(COORDINATOR, CancelAck(request, self.rank))

    def _on_tpbatch(self, msg: TpBatch) -> None:
        self.tp.decided(msg)
        self._settle()

    def _settle(self) -> None:
        """Drop the cancelled requests every leader of this rank has released (tp_agree.py)."""
        for request, reason in self.tp.settle():
            self._cancelled(request, reason)

    def _on_healthquery(self, msg: HealthQuery) -> None:
        self.send(COORDINATOR, Health(self.rank, self.counters() if msg.counters else {}))

    # ---- instances ----------------------------------------------------------------------

    def start(self, request: int, key: str, walk: str, inputs: dict[str, Any], flow, prior: int = 0) -> None:
        schedule = self.rp.code.get(walk)
        if schedule is None or request in self.dead:
            return
        state = self.state(request)
        inst = Instance(request, key, walk, schedule.instructions, flow, dict(inputs), prior=prior)
        state.instances[key] = inst
        if flow is None:
            stream = self.rp.other_consumers.get(walk) if self.rp.other_consumers else None
            if stream is None:
                self.make_ready(inst)
                return
            queue = state.consumer_queue.setdefault(stream, [])
            queue.append(inst)
            queue.sort(key=lambda i: i.prior)
            self._admit_head(queue, state.consumers_finished.get(stream, 0))
            return
        queue = state.flow_queue.setdefault(flow.flow, [])
        queue.append(inst)
        queue.sort(key=lambda i: i.prior)
        self._start_flow_head(state, flow.flow)

    def _start_flow_head(self, state: RequestState, flow: str) -> None:
        queue = state.flow_queue.get(flow)
        if queue:
            self._admit_head(queue, state.flow_finished.get(flow, 0))

    def _admit_head(self, queue: list[Instance], finished: int) -> None:
        """Start the first instance of an ordered queue once every instance before it has finished."""
        if not queue[0].admitted and queue[0].prior == finished:
            queue[0].admitted = True
            self.make_ready(queue[0])

    def make_ready(self, inst: Instance) -> None:
        """The instance may run again (a message it waited for came): queue it, unless it is at a RUN."""
        inst.waiting = None
        if not inst.dispatched:
            self.ready.append(inst)

    def _wake(self, state: RequestState, key: str, reason: tuple[str, ...]) -> None:
        inst = state.instances.get(key)
        if inst is not None and inst.waiting == reason:
            self.make_ready(inst)

    def finish(self, inst: Instance) -> None:
        inst.alive = False
        state = self.states.get(inst.request)
        if state is None:
            return
        state.instances.pop(inst.key, None)
        if inst.flow is None:
            self.interp.consumer_finished(state, inst)
            stream = self.rp.other_consumers.get(inst.walk) if self.rp.other_consumers else None
            if stream is not None:
                self._other_consumer_finished(state, stream, inst)
            return
        flow = inst.flow.flow
        queue = state.flow_queue.get(flow)
        if queue and queue[0] is inst:
            queue.pop(0)
            state.flow_finished[flow] = state.flow_finished.get(flow, 0) + 1
            if queue:
                self._start_flow_head(state, flow)
            else:
                del state.flow_queue[flow]
            if state.flow_ends:
                self._flow_end_check(state, flow)

    def _flow_end_check(self, state: RequestState, flow: str) -> None:
        """An ended flow whose instances have all finished here: close its streams behind this rank's
        items, and tell the coordinator when it waits for this rank's outputs."""
        end = state.flow_ends.get(flow)
        if end is None or state.flow_finished.get(flow, 0) < end.walks:
            return
        del state.flow_ends[flow]
        self.interp.close_streams(end.request, end.flow)
        if end.report:
            self.send(COORDINATOR, Drained(end.request, self.rank, flow=end.flow))

    def _other_consumer_finished(self, state: RequestState, stream: str, inst: Instance) -> None:
        finished = state.consumers_finished[stream] = state.consumers_finished.get(stream, 0) + 1
        queue = state.consumer_queue.get(stream)
        if queue and queue[0] is inst:
            queue.pop(0)
            if queue:
                self._admit_head(queue, finished)
            else:
                del state.consumer_queue[stream]
        self._consumers_end_check(state, stream)

    def _consumers_end_check(self, state: RequestState, stream: str) -> None:
        walks = state.consumer_ends.get(stream)
        if walks is not None and state.consumers_finished.get(stream, 0) >= walks:
            del state.consumer_ends[stream]
            self.send(COORDINATOR, Drained(state.request, self.rank, stream=stream))

    def fail(self, request: int, error: str) -> None:
        self.failures += 1
        self.send(COORDINATOR, Failed(request, self.rank, error))
        waiting = self.tp.failed(request, self.post) if self.tp.active else None  # a Cancel kept for a release
        if waiting is None:
            self.drop_request(request)
        else:
            self._cancelled(request, waiting)

    def drop_request(self, request: int) -> None:
        """Forget everything of a request on this rank: its state (instances, messages, stream ends) and
        its component state. Its instances still in `ready` are skipped there (not alive)."""
        if request not in self.dead:
            self.dead.add(request)
            self._dead_order.append(request)
            if len(self._dead_order) > DEAD_REMEMBERED:
                self.dead.discard(self._dead_order.popleft())
        state = self.states.pop(request, None)
        if state is not None:
            for inst in state.instances.values():
                inst.alive = False
        if self.deferred:
            self.deferred = [i for i in self.deferred if i.request != request]
        self.held.drop(request)
        for comp in self.components.values():
            comp.release(request)

    # ---- progress ------------------------------------------------------------------------

    def run(self, max_rounds: int | None = None) -> None:
        """Run until every instance is blocked on a message or finished, or for `max_rounds` rounds of
        batched calls (the caller then reads its messages — cancels, probes, new requests — and runs again)."""
        advance = self.interp.advance
        rounds = 0
        if self.deferred:
            self._retry_deferred()
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
            for inst in self.lockstep.hold(batches.values(), self._instances):
                inst.dispatched = False
                self.defer(inst)
            held, order = self.tp.agree(batches, self.batcher.order(batches), self.post)
            for inst in held:
                inst.dispatched = False
                self.defer(inst)
            if self.flush is not None:
                self.flush()
            self.batcher.new_round()
            progressed = False
            if self.batcher.mixes and len(order) > 1:  # a component's entries in one forward (mixed.py)
                progressed = self._dispatch_mixed(batches, order)
            else:
                for key in order:
                    if batches[key]:
                        progressed = self.batcher.dispatch(key[0], key[1], batches[key]) or progressed
            if self.deferred and progressed:  # pages or budget may be there now: retry next round
                self._retry_deferred()
            if self.tp.ending:  # the round ran the last decisions naming them, perhaps
                self._settle()

    def _dispatch_mixed(self, batches: dict[tuple[str, str], list[Instance]], order: list[tuple[str, str]]) -> bool:
        progressed = False
        for keys in self.batcher.together(order):
            if len(keys) > 1:
                progressed = dispatch_mixed(self.batcher, keys[0][0], [(k[1], batches[k]) for k in keys]) or progressed
            elif batches[keys[0]]:
                progressed = self.batcher.dispatch(keys[0][0], keys[0][1], batches[keys[0]]) or progressed
        return progressed

    def _instances(self) -> list[Instance]:
        return [i for s in self.states.values() for i in s.instances.values()]

    def _retry_deferred(self) -> None:
        ready = self.ready
        for inst in self.deferred:
            if inst.alive:
                ready.append(inst)
        self.deferred.clear()

    def defer(self, inst: Instance) -> None:
        """The instance stays at its RUN until a later round (waiting for pages or budget, or a chunk
        of its input was written): it is retried once a round has made progress, or after the next
        message (pages come back when a request ends or is cancelled)."""
        self.deferred.append(inst)

    # ---- outbound ------------------------------------------------------------------------

    def post(self, destination: int, msg: Message) -> None:
        """Deliver to another rank, or to this one without a socket."""
        self.stats["messages_out"] += 1
        if destination == self.rank:
            self.handle(msg)
        else:
            self.send(destination, msg)

    def flow_done(self, request: int, flow: str, on_rank: dict[int, int], cut: list[str] | None = None) -> None:
        """The flow's last walk ran NEXT here. `on_rank`: how many of the flow's walk instances each rank got;
        `cut`: the flow's walks whose dynamic loop stopped at its max bound.

        The coordinator must not end the request on this FlowDone alone: another rank of the flow's walks
        may still be running them and emitting (NEXT does not wait for a walk's other ranks), and its
        Outputs travel on its own socket, which nothing orders against this one. So every other rank that
        emits in the flow's walks, and ran any, reports `Drained` once it has finished them; this rank's
        own outputs are already ahead of the FlowDone (NEXT is the last instruction of its schedule, and
        its earlier walks of the flow finished before this one started)."""
        drains = [r for r in self.rp.flow_emitters.get(flow, ()) if r != self.rank and on_rank.get(r, 0)]
        self.send(COORDINATOR, FlowDone(request, flow, drains, list(cut or ())))
        for r in sorted(set(self.rp.flow_producers.get(flow, ())).union(drains)):
            self.post(r, FlowEnded(request, flow, on_rank.get(r, 0), r in drains))

    def counters(self) -> dict[str, int]:
        states = self.states.values()
        out = {
            "instances": sum(len(s.instances) for s in states),
            "requests": len(self.states),
            "mailbox": sum(s.mail_count() for s in states),
            "stream_ends": sum(len(s.producers) + len(s.consumers) for s in states),
            **self.stats,
            **self.batcher.stats,
            "deferred": len(self.deferred),
            "held_for_step": self.lockstep.held,
            "messages_out": self.stats["messages_out"] + self.held.messages,  # posted, and the held items' sends
            "held_stream_messages": self.held.messages,  # StreamItems sent by held_items.py, and their items
            "held_stream_items": self.held.items,
            **gc_counters(),
        }
        for name, comp in self.components.items():
            for key, value in comp.counters().items():
                out[f"{name}.{key}"] = value
        for (component, entry), (calls, items, micros) in self.entry_stats.items():
            out[f"{component}.{entry}.calls"] = calls
            out[f"{component}.{entry}.items"] = items
            out[f"{component}.{entry}.compute_us"] = micros
        return out


# The executor's handler for every message a rank is sent, by type: a renamed message keeps its handler,
# and a message type without one fails this import. Shutdown is the worker process's own
# (runtime/process/worker.py) and never reaches the executor.
HANDLERS: dict[type, Callable[[Executor, Any], None]] = {
    RequestInit: Executor._on_requestinit,
    StartWalk: Executor._on_startwalk,
    TpBatch: Executor._on_tpbatch,
    Data: Executor._on_data,
    KvData: Executor._on_kvdata,
    StreamItems: Executor._on_streamitems,
    StreamCredit: Executor._on_streamcredit,
    FlowEnded: Executor._on_flowended,
    ConsumersEnded: Executor._on_consumersended,
    Cancel: Executor._on_cancel,
    HealthQuery: Executor._on_healthquery,
}
check_handlers(HANDLERS, ToWorker, {Shutdown}, "the executor (runtime/worker/executor.py)")
