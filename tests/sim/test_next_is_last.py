"""A NEXT is the last instruction of its schedule: the runtime reports the flow finished at NEXT and counts
on the end rank's own outputs being sent by then (docs/plan.md, walk instances and ranks)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from wgc.runtime.worker.context import RankPlan

from tests.sim.plans import emit, ev, free, make_plan, nxt
from wgc.plan.model import ELit, Plan
from wgc.semantics.plan_index import PlanError
from wgc.sim.request import make_request
from wgc.sim.simulator import simulate

# The plan index is shared: the simulator and every rank of the runtime refuse the same plans.
READERS: dict[str, Callable[[Plan], object]] = {
    "simulator": lambda plan: simulate(plan, make_request()),
    "runtime": lambda plan: RankPlan.build(plan, 0),
}


@pytest.mark.parametrize("read", READERS.values(), ids=READERS.keys())
def test_an_emit_after_next_is_a_plan_error(read: Callable[[Plan], object]) -> None:
    plan = make_plan({"w": {0: [ev("a", ELit(1)), nxt(), emit("text", "a", line=4)]}})
    with pytest.raises(PlanError, match=r"instruction 1 \(next\).*NEXT is not the last instruction"):
        read(plan)


def test_anything_after_next_is_a_plan_error_and_next_last_is_fine() -> None:
    after = make_plan({"w": {0: [ev("a", ELit(1)), nxt(), free("a")]}})
    with pytest.raises(PlanError, match="NEXT is not the last instruction"):
        simulate(after, make_request())
    last = make_plan({"w": {0: [ev("a", ELit(1)), emit("text", "a"), free("a"), nxt()]}})
    assert simulate(last, make_request()) == {"text": [1]}
