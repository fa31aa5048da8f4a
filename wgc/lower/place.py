"""Pass `place`: give every operation the rank(s) it runs on.

Component calls go where the placement puts the component (a branch pin, then
a per-walk pin, then the component's first copy); a call on a tensor-parallel
component runs on its whole TP group. Everything else runs where its inputs
are: an eval, emit or push on the rank that holds the value it reads, a pop
on the rank of the first operation that uses the chunk.

Data-parallel copies: schedules are lowered for the first copy; further copies
run the same schedule (the routing policy picks one per request).
"""

from __future__ import annotations

from wgc.lower.ir import LoopBlock, Node, Op, ParallelBlock, WalkIR, all_ops
from wgc.placement.schema import Placement


def ranks_for(placement: Placement, component: str, walk: str, branch: str | None) -> list[int]:
    wp = placement.walk(walk)
    if wp is not None:
        pin = wp.branch_pin(branch) if branch else None
        pin = pin or wp.component_pin(component)
        if pin is not None:
            return list(pin.ranks)
    comp = placement.component(component)
    if comp is None or not comp.ranks:
        return [0]
    if comp.routing == "mirror":
        return list(comp.ranks)  # every copy runs unpinned calls and keeps its own cache labels
    return list(comp.copies[0])


def place_walk(walk: WalkIR, placement: Placement) -> None:
    ops = all_ops(walk.body)
    for op in ops:
        if op.kind in ("run", "fork"):
            op.ranks = ranks_for(placement, op.component, walk.name, op.branch)
    primary = next((op.home for op in ops if op.ranks), 0)
    home: dict[str, int] = {}
    for op in ops:
        if op.ranks:
            for name in op.defines():
                home[name] = op.home
    first_user = _first_users(ops)
    # Data-following ops may depend on each other (an eval feeding an emit), so settle them in order.
    for op in ops:
        if op.ranks:
            continue
        used = [home[n] for n in op.uses() if n in home]
        if op.kind == "pop" or not used:
            target = first_user.get(op.outputs[0] if op.outputs else "", None)
            op.ranks = [target.home if target is not None and target.ranks else primary]
        else:
            op.ranks = [used[0]]
        for name in op.defines():
            home[name] = op.home
    _late_users(ops, first_user)
    walk.ranks = sorted({r for op in ops for r in op.ranks}) or [primary]
    walk.end_rank = home.get(walk.result, ops[-1].home if ops else primary) if walk.result else (
        ops[-1].home if ops else primary)


def _first_users(ops: list[Op]) -> dict[str, Op]:
    first: dict[str, Op] = {}
    for op in ops:
        for name in op.uses():
            first.setdefault(name, op)
    return first


def _late_users(ops: list[Op], first_user: dict[str, Op]) -> None:
    """A pop or eval placed before its user had a rank takes the user's rank once known."""
    for op in ops:
        if op.kind == "pop" and op.outputs:
            user = first_user.get(op.outputs[0])
            if user is not None and user.ranks and user.ranks != op.ranks:
                op.ranks = [user.home]


def parallel_blocks(body: list[Node]) -> list[ParallelBlock]:
    out: list[ParallelBlock] = []
    for node in body:
        if isinstance(node, ParallelBlock):
            out.append(node)
            for _, branch in node.branches:
                out.extend(parallel_blocks(branch))
        elif isinstance(node, LoopBlock):
            out.extend(parallel_blocks(node.body))
    return out

