"""The lowering IR's properties, each with the check that it holds: run between passes.

Every pass of wgc/lower/pipeline.py names the properties it requires and the ones it produces.
After each pass, `verify` checks what it produced, and once lowering is done every property again
(a later pass must not undo an earlier one's work), so a pass that forgets half its job fails at
that pass with a message naming the property and the place, not three passes later as a wrong
plan; one moved before what it needs is refused before lowering starts. Checks read the IR only; each is linear in its size (a compile spends well under a
millisecond here).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from wgc.lower.ir import LoopBlock, Node, Op, ParallelBlock, Transfer, all_ops
from wgc.lower.liveness import reads, writes
from wgc.plan.model import Free, Run

if TYPE_CHECKING:
    from wgc.lower.pipeline import LowerState

OP_KINDS = frozenset({"run", "eval", "push", "pop", "emit", "fork", "return"})


class IRError(AssertionError):
    """A property a pass promised does not hold: a bug in lowering, never in the user's program."""


def _nodes(body: list[Node]) -> Iterator[Node]:
    """Every node of a body, depth first, through loops and parallel branches."""
    for node in body:
        yield node
        if isinstance(node, LoopBlock):
            yield from _nodes(node.body)
        elif isinstance(node, ParallelBlock):
            for _, branch in node.branches:
                yield from _nodes(branch)


def _walks(s: LowerState) -> None:
    names = [w.name for w in s.walks]
    if len(set(names)) != len(names):
        raise IRError(f"walks: a walk name occurs twice in {names}")
    for w in s.walks:
        for node in _nodes(w.body):
            if isinstance(node, Op) and node.kind not in OP_KINDS:
                raise IRError(f"walks: {w.name} has an operation of unknown kind `{node.kind}`")


def _placed(s: LowerState) -> None:
    ranks = set(s.all_ranks)
    for w in s.walks:
        if not w.ranks or not set(w.ranks) <= ranks:
            raise IRError(f"placed: walk {w.name} runs on ranks {w.ranks}, the cluster has {sorted(ranks)}")
        for node in _nodes(w.body):
            if isinstance(node, Op) and (not node.ranks or not set(node.ranks) <= ranks):
                raise IRError(f"placed: a {node.kind} of {w.name} (line {node.src.line}) is on ranks {node.ranks}")


def _fused(s: LowerState) -> None:
    for w in s.walks:
        for op in all_ops(w.body):
            if not op.lanes:
                continue
            if len(op.lanes) < 2 or any(lane.lanes for lane in op.lanes):
                raise IRError(f"fused: a batched call of {w.name} (line {op.src.line}) has {len(op.lanes)} lanes")
            if any((lane.component, lane.entry, lane.ranks) != (op.component, op.entry, op.ranks) for lane in op.lanes):
                raise IRError(f"fused: the lanes of {op.component}.{op.entry} in {w.name} call different things")


def _flat(s: LowerState) -> None:
    for w in s.walks:
        for node in _nodes(w.body):
            if isinstance(node, ParallelBlock):
                raise IRError(f"flat: walk {w.name} still has the parallel block of line {node.src.line}")


def _transfers(s: LowerState) -> None:
    ranks = set(s.all_ranks)
    for w in s.walks:
        for node in _nodes(w.body):
            if isinstance(node, Transfer) and (node.source == node.target or not {node.source, node.target} <= ranks):
                raise IRError(f"transfers: {w.name} moves `{node.value}` from rank {node.source} to {node.target}")
            if isinstance(node, LoopBlock) and (not node.ranks or not set(node.ranks) <= ranks):
                raise IRError(f"transfers: the loop of {w.name} (line {node.src.line}) takes part on {node.ranks}")


def _flows(s: LowerState) -> None:
    known = {w.name for w in s.walks} | {"done"}
    for f in s.flows:
        known_here = known | {e.name for e in f.eaches}
        targets = [t.target for outs in f.transitions.values() for t in outs]
        targets += [name for e in f.eaches for arm in e.arms for name in arm.walks]
        missing = sorted(set(targets) - known_here)
        if missing:
            raise IRError(f"flows: flow {f.name or '(default)'} names {missing}, which no walk or each-block is")


def _schedules(s: LowerState) -> None:
    walks = {w.name for w in s.walks}
    if sorted(s.schedules) != s.all_ranks:
        raise IRError(f"schedules: ranks {sorted(s.schedules)} have schedules, the cluster has {s.all_ranks}")
    for r, schedules in s.schedules.items():
        for ws in schedules:
            if ws.walk not in walks or not ws.instructions:
                raise IRError(f"schedules: rank {r} has an empty or unknown schedule `{ws.walk}`")


def _frees(s: LowerState) -> None:
    """In a schedule, no instruction reads a value after a FREE of it, unless something defined it again."""
    for r, schedules in s.schedules.items():
        for ws in schedules:
            freed: dict[str, int] = {}
            for i, ins in enumerate(ws.instructions):
                if isinstance(ins, Free):
                    freed.update((v, i) for v in ins.values)
                    continue
                read = sorted(set(reads(ins)) & set(freed))
                if read:
                    raise IRError(f"frees: rank {r}, {ws.walk}: instruction {i} reads `{read[0]}`, freed at {freed[read[0]]}")
                for name in writes(ins):
                    freed.pop(name, None)


def _captures(s: LowerState) -> None:
    ids = {(c.graph_id, c.rank) for c in s.captures}
    if s.placement.cluster.device != "cuda" and s.captures:
        raise IRError("captures: CUDA graphs planned for a CPU cluster")
    for r, schedules in s.schedules.items():
        for ws in schedules:
            for ins in ws.instructions:
                if isinstance(ins, Run) and ins.graph_id >= 0 and (ins.graph_id, r) not in ids:
                    raise IRError(f"captures: rank {r}, {ws.walk}: {ins.component}.{ins.entry} uses graph "
                                  f"{ins.graph_id}, which is not planned on that rank")


def _plan(s: LowerState) -> None:
    if len(s.plan.ranks) != len(s.all_ranks):
        raise IRError(f"plan: {len(s.plan.ranks)} rank specs for {len(s.all_ranks)} ranks")


CHECKS: dict[str, Callable[[LowerState], None]] = {
    "walks": _walks,  # every walk of the program as IR, names unique
    "placed": _placed,  # every operation has ranks of the cluster
    "fused": _fused,  # batched calls have two or more lanes of the same entry on the same ranks
    "flat": _flat,  # no parallel block is left
    "transfers": _transfers,  # transfers join two ranks; every loop knows the ranks taking part
    "flows": _flows,  # every flow names walks that exist
    "kv": lambda s: None,  # cache labels shipped: a property of transfers, checked there
    "schedules": _schedules,  # one schedule list per rank, each of a known walk
    "frees": _frees,  # nothing is read after its FREE
    "captures": _captures,  # every graph a RUN uses is planned on its rank
    "plan": _plan,
}


def verify(s: LowerState, properties: set[str]) -> None:
    for name in sorted(properties):
        CHECKS[name](s)

