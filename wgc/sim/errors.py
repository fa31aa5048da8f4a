"""The two ways a simulated request fails: the plan is wrong (SimulationError), or the request cannot complete."""

from __future__ import annotations

from wgc.semantics.plan_index import PlanError


class RequestError(Exception):
    """The request cannot complete, whatever the plan: no flow transition holds, a stream read past its end."""


class SimulationError(PlanError):
    """The plan is wrong, as running it shows: a deadlock, an unmatched or misordered transfer, a use after
    free, an undefined value. A plan whose shape is wrong fails earlier, indexing it (PlanError)."""
