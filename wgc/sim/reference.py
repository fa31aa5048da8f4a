"""The reference interpreter: runs a checked, unplaced program on mock components.

    outputs = run_reference(check_source(text, "m.walk"), make_request(["text"], outputs=["text"]))
    # {"text": [3, 11, ...]}: each modality's emitted values in order

It defines what a request computes, with no ranks, no messages and no
placement; the simulator must produce the same outputs from any lowered plan.
"""

from __future__ import annotations

from wgc.check import CheckResult
from wgc.lang import ast
from wgc.semantics.mock import MockEngine, Value
from wgc.sim.driver import Instance, LoopPolicy, RequestDriver, Task
from wgc.sim.program import ProgramFacts, facts
from wgc.sim.ref_walk import RefWalk
from wgc.sim.request import MockRequest, Outputs, with_defaults
from wgc.sim.streams import StreamBoard


class RefTask:
    def __init__(self, driver: ReferenceDriver, instance: Instance, walk: RefWalk) -> None:
        self.driver = driver
        self.instance = instance
        self.walk = walk
        self.gen = walk.run()
        self.done = False

    def run(self) -> bool:
        before = self.walk.steps
        try:
            next(self.gen)
        except StopIteration as stop:
            self.done = True
            self.driver.walk_ended(self.instance, stop.value)
            return True
        return self.walk.steps != before

    def blocked(self) -> str:
        return self.walk.waiting


class ReferenceDriver(RequestDriver):
    def __init__(self, program: ProgramFacts, request: MockRequest, loops: LoopPolicy) -> None:
        board = StreamBoard(program.streams, program.producers, program.readers)
        super().__init__(request, with_defaults(request, program.defaults), program.components, program.walks,
                         program.flows, board, loops)
        self.facts = program
        self.engine = MockEngine(program.components)
        self.decls = {w.name: w for w in program.program.of(ast.Walk)}

    def make_tasks(self, instance: Instance, inputs: dict[str, Value]) -> list[Task]:
        return [RefTask(self, instance, RefWalk(self, self.decls[instance.walk], inputs))]


def run_reference(checked: CheckResult | ProgramFacts, request: MockRequest, loops: LoopPolicy | None = None) -> Outputs:
    """Run one request; raises RequestError when the request cannot complete (no flow transition holds, ...)."""
    program = checked if isinstance(checked, ProgramFacts) else facts(checked)
    return ReferenceDriver(program, request, loops or LoopPolicy()).run()
