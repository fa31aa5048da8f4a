"""Flow transitions where a walk ends: restore the flow's cursor from the state it travelled with, step it.

The state machine itself is wgc/semantics/flows.py (shared with the simulator);
this module only moves its position in and out of the `FlowState` message
field, so whichever rank a walk ends on can take the next transition locally.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wgc.runtime.protocol.messages import FlowState, RequestInit

from wgc.plan.model import Expr
from wgc.semantics.flows import Finished, FlowCursor, FlowTable, Position, RunWalk, Step

Evaluate = Callable[[Expr, "str | None"], Any]


@dataclass(frozen=True)
class Launch:
    """Start `walk` (instance `key`) of a flow with these inputs; `state` travels with it."""

    walk: str
    key: str
    inputs: dict[str, Any]
    state: FlowState


def restore(table: FlowTable, state: FlowState, init: RequestInit, evaluate: Evaluate) -> FlowCursor:
    cursor = table.cursor([p.kind for p in init.parts], evaluate)
    cursor.seek(Position(state.node, state.each, state.part, tuple(state.arm), state.pos))
    return cursor


def snapshot(cursor: FlowCursor, before: FlowState, results: dict[str, Any], cut: list[str]) -> FlowState:
    at = cursor.position()
    return FlowState(before.flow, at.node, at.each, at.part, list(at.arm), at.pos,
                     before.started + 1, results, dict(before.on_rank), cut)


def on_ranks(launch: Launch, ranks: list[int]) -> tuple[FlowState, dict[int, int]]:
    """The state the walk carries (its ranks counted) and, per rank, how many walks of the flow precede it."""
    prior = {r: launch.state.on_rank.get(r, 0) for r in ranks}
    counted = dict(launch.state.on_rank)
    for r in ranks:
        counted[r] = prior[r] + 1
    state = launch.state
    return FlowState(state.flow, state.node, state.each, state.part, list(state.arm), state.pos, state.started,
                     state.results, counted, list(state.cut)), prior


def launch(step: Step, cursor: FlowCursor, before: FlowState, results: dict[str, Any], result: Any,
           init: RequestInit, walk_args: Callable[[str], list[str]], missing: Callable[[str], Any],
           cut: list[str] | None = None) -> Launch | None:
    """The walk a flow step starts, with its inputs bound; None when the flow finished."""
    if isinstance(step, Finished):
        return None
    assert isinstance(step, RunWalk)
    args = walk_args(step.walk)
    if step.feed == "part" and args:
        inputs = {args[0]: init.parts[step.part].payload}
    elif step.feed == "result" and args:
        inputs = {args[0]: result}
    else:
        inputs = {a: init.inputs[a] if a in init.inputs else missing(a) for a in args}
    state = snapshot(cursor, before, results, list(before.cut) if cut is None else cut)
    return Launch(step.walk, f"{before.flow}/{step.walk}#{before.started}", inputs, state)


def first_step(table: FlowTable, init: RequestInit, evaluate: Evaluate, walk_args: Callable[[str], list[str]],
               missing: Callable[[str], Any]) -> Launch | None:
    """What a flow starts with when its request is admitted (run by the coordinator)."""
    cursor = table.cursor([p.kind for p in init.parts], evaluate)
    state = FlowState(table.name, "start")
    return launch(cursor.begin(), cursor, state, {}, None, init, walk_args, missing)


def cut_after(state: FlowState, walk: str, cut: bool) -> list[str]:
    """The flow's cut walks once `walk` ended (`cut`: a dynamic loop of it stopped at its max bound)."""
    return [*state.cut, walk] if cut and walk not in state.cut else list(state.cut)


def next_step(table: FlowTable, state: FlowState, walk: str, result: Any, returns: bool, init: RequestInit,
              evaluate: Evaluate, walk_args: Callable[[str], list[str]], missing: Callable[[str], Any],
              cut: bool = False) -> Launch | None:
    results = dict(state.results)
    if returns:
        results[walk] = result
    cursor = restore(table, state, init, evaluate)
    return launch(cursor.finished(walk), cursor, state, results, result, init, walk_args, missing,
                  cut_after(state, walk, cut))
