"""The plan simulator: every rank's schedules executed on mock components, checked as they run.

    outputs = simulate(plan, make_request(["text"]))   # {"text": [...]}, as run_reference gives

One RankThread per (rank, walk instance); threads run round-robin until each
blocks or ends. Transfers are FIFO per (sender, receiver, walk instance); a
RECV whose next message has another tag is misordered. A SimulationError
names the rank, walk, instruction (index and kind) and source position for:
a deadlock or a RECV that can never be matched, a SEND never received, a
misordered pair, a use after FREE, a read of a value not defined on the rank,
a walk whose end rank never reaches NEXT.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from wgc.plan.model import Plan, Pop, Push
from wgc.semantics.flows import FlowTable
from wgc.semantics.mock import MockComponent, MockEngine, Value
from wgc.semantics.plan_index import PlanIndex
from wgc.sim.driver import Instance, LoopPolicy, RequestDriver, Task
from wgc.sim.errors import SimulationError
from wgc.sim.labels import LabelLedger
from wgc.sim.rank_thread import Channel, RankThread
from wgc.sim.request import MockRequest, Outputs, with_defaults
from wgc.sim.streams import StreamBoard

if TYPE_CHECKING:
    from wgc.sim.verify import Problem


class PlanDriver(RequestDriver):
    def __init__(self, index: PlanIndex, request: MockRequest, loops: LoopPolicy) -> None:
        plan = index.plan
        components = {c.name: MockComponent.from_spec(c) for c in plan.components}
        defaults = {p.name: p.default for p in plan.params}
        flows = [FlowTable(f, index.walks) for f in plan.flows]
        super().__init__(request, with_defaults(request, defaults), components, index.walks, flows,
                         StreamBoard(plan.streams, index.stream_users(Push), index.stream_users(Pop)), loops)
        self.plan = plan
        self.index = index
        self.engines: dict[int, MockEngine] = {}
        self.channels: dict[tuple[int, int, int], Channel] = {}
        self.ledger = LabelLedger()

    def engine(self, rank: int) -> MockEngine:
        if rank not in self.engines:
            self.engines[rank] = MockEngine(self.components)
        return self.engines[rank]

    def channel(self, sender: int, receiver: int, instance: int) -> Channel:
        key = (sender, receiver, instance)
        if key not in self.channels:
            self.channels[key] = deque()
        return self.channels[key]

    def make_tasks(self, instance: Instance, inputs: dict[str, Value]) -> list[Task]:
        spec = self.index.walks[instance.walk]
        return [RankThread(self, instance, self.index.schedule(r, instance.walk), inputs) for r in spec.ranks]

    def instance_finished(self, instance: Instance) -> None:
        for (_, receiver, inst), q in self.channels.items():
            if inst == instance.id and q:
                msg = q[0]
                raise SimulationError(f"{msg.kind} `{msg.tag}` to rank {receiver} is never received "
                                      f"({len(q)} message(s) left)", msg.origin)
        if not instance.ended and instance.cursor is not None:  # a stream-fired walk needs no NEXT
            spec = self.index.walks[instance.walk]
            raise SimulationError(f"walk `{instance.walk}` finished on every rank, but its end rank "
                                  f"{spec.end_rank} never ran NEXT")
        for key in [k for k in self.channels if k[2] == instance.id]:
            del self.channels[key]

    def deadlock(self, blocked: list[tuple[Instance, Task]]) -> Exception:
        first_instance, first = blocked[0]
        assert isinstance(first, RankThread)
        others = [f"{t.here()}: {t.waiting}{self._unmatchable(i, t)}" for i, t in blocked[1:]
                  if isinstance(t, RankThread)]
        more = f" (also blocked: {'; '.join(others)})" if others else ""
        return SimulationError(f"deadlock: {first.waiting}{self._unmatchable(first_instance, first)}{more}",
                               first.here())

    def _unmatchable(self, instance: Instance, task: Task) -> str:
        """Say so when a RECV waits for a rank that has already finished this walk."""
        if not isinstance(task, RankThread) or task.pc >= len(task.schedule.code):
            return ""
        peer = getattr(task.schedule.code[task.pc], "peer", None)
        if peer is None:
            return ""
        for other in instance.tasks:
            if isinstance(other, RankThread) and other.rank == peer:
                return f"; rank {peer} finished the walk without sending it: the recv can never be matched" \
                    if other.done else ""
        return f"; rank {peer} does not run this walk: the recv can never be matched"


def verify(plan: Plan) -> list[Problem]:
    """The compiler's verification pass (wgc/sim/verify.py), here for `wgc.compile`."""
    from wgc.sim.verify import verify as run

    return run(plan)


def simulate(plan: Plan | PlanIndex, request: MockRequest, loops: LoopPolicy | None = None) -> Outputs:
    """Run one request through the plan's schedules; raises SimulationError (plan bug) or RequestError."""
    index = plan if isinstance(plan, PlanIndex) else PlanIndex(plan)
    return PlanDriver(index, request, loops or LoopPolicy()).run()
