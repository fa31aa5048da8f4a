"""Interpreters on mock components: the reference (checked AST, unplaced) and the plan simulator.

    run_reference(check_result, request) -> {modality: [values]}
    simulate(plan, request)              -> the same, from the per-rank schedules (SimulationError on plan bugs)
    verify(plan)                         -> [problems], the compiler's verification pass
"""

from wgc.sim.driver import LoopPolicy
from wgc.sim.errors import RequestError, SimulationError
from wgc.sim.reference import run_reference
from wgc.sim.request import MockRequest, Outputs, make_request
from wgc.sim.simulator import simulate
from wgc.sim.verify import verify

__all__ = [
    "LoopPolicy",
    "MockRequest",
    "Outputs",
    "RequestError",
    "SimulationError",
    "make_request",
    "run_reference",
    "simulate",
    "verify",
]
