"""One rank's part of one walk instance: a program counter over its schedule, a frame, and a loop stack.

`run()` executes instructions until one blocks (a RECV with no message, a POP
with no chunk, a PUSH into a full stream) or the schedule ends. Every read
checks the frame, so a value used after its FREE or never defined on this
rank stops the simulation with the instruction's position.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wgc.plan import model as pm
from wgc.semantics.mock import MockEngine, Value
from wgc.semantics.mock_exprs import evaluate
from wgc.semantics.plan_index import Location, Schedule, locate
from wgc.sim.driver import DriverNames
from wgc.sim.errors import SimulationError
from wgc.sim.instructions import HANDLERS, LoopState, ReadError

if TYPE_CHECKING:
    from wgc.sim.driver import Instance
    from wgc.sim.simulator import PlanDriver


@dataclass(frozen=True)
class Message:
    kind: str  # "value" (SEND) or "kv" (KV_SEND)
    tag: str
    payload: Value
    origin: Location  # where it was sent, for "never received"


Channel = deque[Message]


class RankThread(DriverNames):
    def __init__(self, driver: PlanDriver, instance: Instance, schedule: Schedule, inputs: dict[str, Value]) -> None:
        self.driver = driver
        self.instance = instance
        self.schedule = schedule
        self.rank = schedule.rank
        self.engine: MockEngine = driver.engine(schedule.rank)
        self.frame: dict[str, Value] = {}
        self.freed: set[str] = set()
        self.never_written: set[str] = set()  # written only in the body of a loop that ran zero times
        self.loops: list[LoopState] = []
        self.writes: Counter[tuple] = Counter()  # cache-label writes made, by logical identity
        self.pc = 0
        self.done = False
        self.waiting = ""
        for name in schedule.inputs:
            if name not in inputs:
                raise SimulationError(f"the walk input `{name}` is not an input of the walk", self.here())
            self.frame[name] = inputs[name]

    # ---- the task protocol --------------------------------------------------------------

    def run(self) -> bool:
        moved = False
        code = self.schedule.code
        while self.pc < len(code):
            instr = code[self.pc]
            try:
                advanced = HANDLERS[type(instr)](self, instr)
            except ReadError as e:
                raise SimulationError(str(e), self.here()) from None
            if not advanced:
                return moved
            moved = True
        self.done = True
        return True

    def blocked(self) -> str:
        return f"{self.here()}: {self.waiting}"

    def here(self) -> Location:
        code = self.schedule.code
        instr = code[self.pc] if self.pc < len(code) else None
        return locate(self.driver.plan, self.rank, self.schedule.walk, self.pc, instr)

    # ---- the frame --------------------------------------------------------------------------

    def value(self, name: str) -> Value:
        if name in self.frame:
            return self.frame[name]
        if name in self.freed:
            raise ReadError(f"use after free: `{name}` was freed on rank {self.rank}")
        raise ReadError(f"`{name}` is not defined on rank {self.rank}")

    def write(self, name: str, value: Value) -> None:
        self.frame[name] = value
        self.freed.discard(name)

    def part_kind(self) -> str:
        raise ReadError("`part.kind` outside an each-block")

    def eval(self, e: pm.Expr) -> Value:
        return evaluate(e, self)

    def step(self) -> bool:
        self.pc += 1
        return True

    def block(self, why: str) -> bool:
        self.waiting = why
        return False

    # ---- cache labels -----------------------------------------------------------------------

    def write_id(self, *what: object) -> tuple:
        """The same logical write on every rank of a group: instance, source position, loop iterations, and
        how many such writes this rank made before (two calls may share a source position)."""
        code = self.schedule.code
        loops = tuple((st.loop_id, st.count) for st in self.loops)
        base = (self.instance.id, code[self.pc].src, loops, *what)
        self.writes[base] += 1
        return (*base, self.writes[base])

    def label_write(self, label: tuple[str, str], what: tuple) -> None:
        problem = self.driver.ledger.write(self.rank, label, self.write_id(*what), self.here())
        if problem is not None:
            raise SimulationError(problem, self.here())

    # ---- messages -------------------------------------------------------------------------------

    def send(self, kind: str, peer: int, tag: str, payload: Value) -> None:
        self.driver.channel(self.rank, peer, self.instance.id).append(Message(kind, tag, payload, self.here()))

    def receive(self, kind: str, peer: int, tag: str) -> Message | None:
        q = self.driver.channel(peer, self.rank, self.instance.id)
        if not q:
            return None
        msg = q[0]
        if msg.kind != kind or msg.tag != tag:
            raise SimulationError(f"misordered transfer: expected {kind} `{tag}` from rank {peer}, "
                                  f"the next message is {msg.kind} `{msg.tag}` (sent by {msg.origin})", self.here())
        return q.popleft()
