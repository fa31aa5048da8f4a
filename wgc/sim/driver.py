"""One request, driven to completion: flows start walks, streams fire consumer walks, tasks run round-robin.

Both interpreters subclass `RequestDriver` and say how a walk instance becomes
tasks (the reference: one generator over the AST; the simulator: one thread
per rank of the plan's schedules). Tasks run until they block or finish; a
full round in which no task moved, no stream closed and no walk started is a
deadlock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from wgc.plan.model import Expr, WalkSpec
from wgc.semantics.flows import Finished, FlowCursor, FlowError, FlowTable, RunWalk, Step
from wgc.semantics.mock import MockComponent, Value, mock_input
from wgc.semantics.mock_exprs import evaluate
from wgc.sim.errors import RequestError
from wgc.sim.request import MockRequest, Outputs
from wgc.sim.streams import StreamBoard


class Task(Protocol):
    done: bool

    def run(self) -> bool: ...  # run until blocked or done; True when anything happened

    def blocked(self) -> str: ...  # what it waits for, for a deadlock report


@dataclass
class Instance:
    """One run of one walk in one request."""

    id: int
    walk: str
    cursor: FlowCursor | None  # None for a walk fired by a stream
    tasks: list[Task] = field(default_factory=list)
    ended: bool = False  # the flow has moved on (the reference: the walk returned; a plan: its NEXT ran)


@dataclass(frozen=True)
class LoopPolicy:
    """How the interpreters run DynamicLoops: at most `cap` iterations, and `ignore_stop` runs exactly that many."""

    cap: int | None = None
    ignore_stop: bool = False

    def bound(self, bound: int, dynamic: bool) -> int:
        return min(bound, self.cap) if dynamic and self.cap is not None else bound


class DriverNames:
    """The names every expression environment reads through its request's driver: params, consts,
    request fields and walk results. Values and the part kind are each environment's own."""

    driver: RequestDriver

    def param(self, name: str) -> Value:
        return self.driver.params[name]

    def const(self, component: str, name: str) -> Value:
        return self.driver.components[component].const(name)

    def request(self, field: str) -> Value:
        return self.driver.request.field_value(field)

    def result(self, walk: str) -> Value:
        return self.driver.results.get(walk)


class FlowEnv(DriverNames):
    """Names in flow conditions: params, consts, request fields, walk results, the part kind."""

    def __init__(self, driver: RequestDriver, part_kind: str | None) -> None:
        self.driver = driver
        self.kind = part_kind

    def value(self, name: str) -> Value:
        raise RequestError(f"a flow condition cannot read the value `{name}`")

    def part_kind(self) -> str:
        if self.kind is None:
            raise RequestError("`part.kind` outside an each-block")
        return self.kind


class RequestDriver:
    def __init__(self, request: MockRequest, params: Mapping[str, Value], components: Mapping[str, MockComponent],
                 walks: Mapping[str, WalkSpec], flows: Sequence[FlowTable], board: StreamBoard,
                 loops: LoopPolicy) -> None:
        self.request = request
        self.params = params
        self.components = components
        self.walks = walks
        self.flows = flows
        self.board = board
        self.loops = loops
        self.outputs: Outputs = {}
        self.results: dict[str, Value] = {}
        self.running: Counter[str] = Counter()
        self.cursors: list[FlowCursor] = []
        self.instances: list[Instance] = []
        self._next_id = 0

    # ---- what subclasses provide ------------------------------------------------------

    def make_tasks(self, instance: Instance, inputs: dict[str, Value]) -> list[Task]:
        raise NotImplementedError

    def instance_finished(self, instance: Instance) -> None:
        """Every task of the instance is done (the simulator checks for unreceived messages here)."""

    def deadlock(self, blocked: list[tuple[Instance, Task]]) -> Exception:
        lines = "; ".join(f"walk `{i.walk}`: {t.blocked()}" for i, t in blocked)
        return RequestError(f"deadlock: {lines}")

    # ---- flows ------------------------------------------------------------------------

    def condition(self, expr: Expr, part_kind: str | None) -> Value:
        return evaluate(expr, FlowEnv(self, part_kind))

    def walk_ended(self, instance: Instance, result: Value) -> None:
        """The walk is over as far as its flow goes: record its result and start what comes next."""
        instance.ended = True
        spec = self.walks[instance.walk]
        if spec.returns is not None:
            self.results[instance.walk] = result
        if instance.cursor is not None:
            self._follow(instance.cursor, self._step(instance.cursor, lambda c: c.finished(instance.walk)), result)

    def _step(self, cursor: FlowCursor, move) -> Step:
        try:
            return move(cursor)
        except FlowError as e:
            raise RequestError(str(e)) from None

    def _follow(self, cursor: FlowCursor, step: Step, result: Value) -> None:
        if isinstance(step, Finished):
            return
        assert isinstance(step, RunWalk)
        self.launch(step.walk, self._inputs(step, result), cursor)

    def _inputs(self, step: RunWalk, result: Value) -> dict[str, Value]:
        args = self.walks[step.walk].inputs
        if step.feed == "part" and args and step.part is not None:
            return {args[0]: self.request.parts[step.part][1]}
        if step.feed == "result" and args:
            return {args[0]: result}
        return {a: self.request.named.get(a, mock_input(a)) for a in args}

    def launch(self, walk: str, inputs: dict[str, Value], cursor: FlowCursor | None) -> Instance:
        self._next_id += 1
        instance = Instance(self._next_id, walk, cursor)
        self.running[walk] += 1
        self.instances.append(instance)
        instance.tasks = self.make_tasks(instance, inputs)
        return instance

    # ---- the loop -----------------------------------------------------------------------

    def run(self) -> Outputs:
        for table in self.flows:
            if table.starts(self.condition):
                cursor = table.cursor(self.request.part_kinds, self.condition)
                self.cursors.append(cursor)
                self._follow(cursor, self._step(cursor, lambda c: c.begin()), None)
        while True:
            moved = False
            for instance in list(self.instances):
                for task in instance.tasks:
                    if not task.done and task.run():
                        moved = True
                if all(t.done for t in instance.tasks):
                    self._retire(instance)
                    moved = True
            moved = self.board.settle(self.running, self.cursors) or moved
            moved = self._fire_consumers() or moved
            if not self.instances:
                return self.outputs
            if not moved:
                blocked = [(i, t) for i in self.instances for t in i.tasks if not t.done]
                raise self.deadlock(blocked)

    def _retire(self, instance: Instance) -> None:
        self.instances.remove(instance)
        self.running[instance.walk] -= 1
        self.instance_finished(instance)

    def _fire_consumers(self) -> bool:
        """Start one consumer walk per ready chunk; one instance per stream at a time, in chunk order."""
        fired = False
        for stream, walk in self.board.consumers():
            if self.running[walk] > 0:
                continue
            chunk = self.board.buffers[stream].poll()
            if chunk is not None:
                names = self.walks[walk].inputs
                self.launch(walk, {names[0]: chunk.value} if names else {}, None)
                fired = True
        return fired
