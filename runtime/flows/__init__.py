"""Flows of a request: the plan's flow tables as pure state machines (table.py)."""

from wgc.runtime.flows.table import (
    DONE,
    START,
    Evaluate,
    Feed,
    Finished,
    FlowCursor,
    FlowError,
    FlowTable,
    RunWalk,
    Step,
)

__all__ = ["DONE", "START", "Evaluate", "Feed", "Finished", "FlowCursor", "FlowError", "FlowTable", "RunWalk", "Step"]
