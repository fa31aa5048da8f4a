"""A flow of the plan as a state machine: which walk runs next, and with what input.

`FlowTable` is the static part (one per FlowSpec, shared by every request);
`FlowCursor` is one flow of one request. Both are pure: conditions are
evaluated by the caller's `evaluate(expr, part_kind)` (part_kind is the kind of
the part an each-arm is matching, None elsewhere), so the runtime and the
simulator share this code (its own tests: tests/runtime/test_flow_table.py).

Rules (docs/plan.md): from a node, `transitions[node]` are tried in order and the
first whose `when` holds (None = true) is taken; no candidate holds → FlowError.
An each-block runs, for every part in order, the first arm whose kind matches
(`_` = any) and whose `when` holds; a part no arm matches is skipped; after the
last part the transitions out of the each-block apply. Inputs: an arm's first
walk takes the part; a walk after a walk that returns a value takes that
result when it has exactly one input; otherwise inputs are the request's named
inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from wgc.plan.model import EachSpec, Expr, FlowSpec, WalkSpec

Evaluate = Callable[[Expr, "str | None"], object]
Feed = Literal["part", "result", "named"]
START = "start"
DONE = "done"
ANY_KIND = "_"
PART_KINDS = ("text", "image", "audio", "video")  # the kinds an each-arm may name besides ANY_KIND


@dataclass(frozen=True)
class RunWalk:
    walk: str
    feed: Feed  # part: the part's payload; result: the previous walk's result; named: the request's named inputs
    part: int | None = None  # index of the part being matched (inside an each-block)


@dataclass(frozen=True)
class Finished:
    """The flow reached `done`."""


Step = RunWalk | Finished


@dataclass(frozen=True)
class Position:
    """Where a cursor stands, as plain data (the runtime carries it in a message to the next walk's rank):
    its node and, inside an each-block, the block, the part, the arm's walks and the walk's place in them."""

    node: str
    each: str | None = None
    part: int = 0
    arm: tuple[str, ...] = ()
    pos: int = 0


class FlowError(Exception):
    def __init__(self, flow: str, node: str, message: str) -> None:
        super().__init__(f"flow `{flow}`, at `{node}`: {message}")
        self.flow = flow
        self.node = node


def flow_walks(spec: FlowSpec) -> set[str]:
    """The walks a flow names: transition targets and each-arm walks (not `done`, not each-blocks)."""
    out = {t.target for outs in spec.transitions.values() for t in outs}
    out |= {w for e in spec.eaches for arm in e.arms for w in arm.walks}
    return out - {DONE} - {e.name for e in spec.eaches}


class FlowTable:
    def __init__(self, spec: FlowSpec, walks: Mapping[str, WalkSpec]) -> None:
        self.spec = spec
        self.walks = walks
        self.eaches: dict[str, EachSpec] = {e.name: e for e in spec.eaches}
        self._reach: dict[str, frozenset[str]] = {}

    @property
    def name(self) -> str:
        return self.spec.name

    def starts(self, evaluate: Evaluate) -> bool:
        return self.spec.when is None or bool(evaluate(self.spec.when, None))

    def cursor(self, part_kinds: Sequence[str], evaluate: Evaluate) -> FlowCursor:
        return FlowCursor(self, part_kinds, evaluate)

    def edges(self, node: str) -> list[str]:
        """Nodes one step after `node` (each-blocks step into their arms' first walks and out)."""
        out = [t.target for t in self.spec.transitions.get(node, [])]
        each = self.eaches.get(node)
        if each is not None:
            out += [a.walks[0] for a in each.arms if a.walks]
        for each in self.spec.eaches:
            for arm in each.arms:
                for i, w in enumerate(arm.walks):
                    if w == node:
                        out.append(arm.walks[i + 1] if i + 1 < len(arm.walks) else each.name)
        return out

    def reachable(self, node: str) -> frozenset[str]:
        """Walks that can start after `node` (not `node` itself unless a cycle leads back)."""
        if node not in self._reach:
            seen: set[str] = set()
            todo = list(self.edges(node))
            while todo:
                n = todo.pop()
                if n not in seen:
                    seen.add(n)
                    todo.extend(self.edges(n))
            self._reach[node] = frozenset(n for n in seen if n not in self.eaches and n not in (START, DONE))
        return self._reach[node]

    def feed_after(self, previous: str, walk: str) -> Feed:
        prev = self.walks.get(previous)
        spec = self.walks.get(walk)
        if prev is not None and prev.returns is not None and spec is not None and len(spec.args) == 1:
            return "result"
        return "named"


class FlowCursor:
    """One flow of one request: `begin()`, then `finished(walk)` each time the running walk ends."""

    def __init__(self, table: FlowTable, part_kinds: Sequence[str], evaluate: Evaluate) -> None:
        self.table = table
        self.part_kinds = list(part_kinds)
        self.evaluate = evaluate
        self.node = START
        self.done = False
        self._each: EachSpec | None = None
        self._part = 0
        self._arm: list[str] = []
        self._pos = 0

    def begin(self) -> Step:
        return self._leave(START)

    def position(self) -> Position:
        each = self._each.name if self._each is not None else None
        return Position(self.node, each, self._part, tuple(self._arm), self._pos)

    def seek(self, at: Position) -> None:
        """Stand where `at` says, as the cursor that made it did."""
        self.node, self.done = at.node, at.node == DONE
        if at.each is None:  # outside an each-block the rest means nothing: as a fresh cursor has it
            self._each, self._part, self._arm, self._pos = None, 0, [], 0
        else:
            self._each, self._part, self._arm, self._pos = self.table.eaches[at.each], at.part, list(at.arm), at.pos

    def finished(self, walk: str) -> Step:
        if self.done or walk != self.node:
            raise FlowError(self.table.name, self.node, f"walk `{walk}` ended, but the flow is at `{self.node}`")
        if self._each is not None:
            if self._pos + 1 < len(self._arm):
                self._pos += 1
                return self._run(self._arm[self._pos], self.table.feed_after(walk, self._arm[self._pos]), self._part)
            return self._each_from(self._part + 1)
        return self._leave(walk)

    def may_run(self, walks: Collection[str]) -> bool:
        """Can any of `walks` still start in this flow (the running walk not counted)?"""
        if self.done:
            return False
        later = self.table.reachable(self._each.name if self._each is not None else self.node)
        if self._each is not None:
            later = later | set(self._arm[self._pos + 1:])
        return any(w in later for w in walks)

    # ---- moves --------------------------------------------------------------------

    def _leave(self, node: str) -> Step:
        candidates = self.table.spec.transitions.get(node, [])
        for t in candidates:
            if t.when is None or self.evaluate(t.when, None):
                return self._enter(t.target, node)
        self.node = node
        reason = "no transition out of it holds" if candidates else "it has no transitions"
        raise FlowError(self.table.name, node, reason)

    def _enter(self, target: str, previous: str) -> Step:
        if target == DONE:
            self.node, self.done = DONE, True
            return Finished()
        each = self.table.eaches.get(target)
        if each is not None:
            self._each = each
            return self._each_from(0)
        return self._run(target, self.table.feed_after(previous, target), None)

    def _each_from(self, first: int) -> Step:
        each = self._each
        assert each is not None
        for i in range(first, len(self.part_kinds)):
            kind = self.part_kinds[i]
            for arm in each.arms:
                if arm.kind in (ANY_KIND, kind) and arm.walks and (
                        arm.when is None or self.evaluate(arm.when, kind)):
                    self._part, self._arm, self._pos = i, list(arm.walks), 0
                    return self._run(arm.walks[0], "part", i)
        self._each, self._arm = None, []
        return self._leave(each.name)

    def _run(self, walk: str, feed: Feed, part: int | None) -> RunWalk:
        self.node = walk
        return RunWalk(walk, feed, part)
