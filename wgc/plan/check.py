"""A decoded plan's internal references, checked: every name and rank an instruction, flow, stream,
walk or capture mentions exists, so no consumer of a loaded plan meets a KeyError or an IndexError.

The checksum proves a plan file whole, not consistent: its body can be edited and every hash
recomputed (file.py). `load_plan` runs `first_problem` on every plan it decodes and refuses one
with a problem like a damaged file, in one line naming the place.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from wgc.plan.model import (
    ComponentSpec,
    EBinary,
    EConst,
    EIndex,
    EndLoop,
    EParam,
    EReq,
    EResult,
    EUnary,
    Eval,
    Expr,
    Fork,
    KvRecv,
    KvSend,
    Loop,
    Plan,
    Pop,
    Push,
    Recv,
    Run,
    Send,
)

REQUEST_FIELDS = frozenset({"task", "think", "inputs", "outputs", "parts"})  # what RequestEnv.request reads
_PLAIN = re.compile(r"[A-Za-z0-9_.:\-]{1,80}")


def q(name: object) -> str:
    """A name as a one-line message shows it: `llm`, or its repr when it is odd (newlines, length)."""
    text = str(name)
    return f"`{text}`" if _PLAIN.fullmatch(text) else repr(text[:80])


class _Names:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.components = {c.name: c for c in plan.components}
        self.walks = {w.name for w in plan.walks}
        self.streams = {s.name for s in plan.streams}
        self.params = {p.name for p in plan.params}
        self.ranks = len(plan.ranks)

    def rank_ok(self, rank: int) -> bool:
        return 0 <= rank < self.ranks


def first_problem(plan: Plan) -> str | None:
    """The first broken reference in `plan`, as one line; None when every reference holds."""
    return next(_problems(plan), None)


def _problems(plan: Plan) -> Iterator[str]:
    names = _Names(plan)
    for kind, items in (("component", plan.components), ("walk", plan.walks), ("stream", plan.streams),
                        ("param", plan.params), ("flow", plan.flows)):
        seen: set[str] = set()
        for item in items:
            if item.name in seen:
                yield f"{kind} {q(item.name)} is declared twice"
            seen.add(item.name)
    for i, r in enumerate(plan.ranks):
        if r.rank != i:
            yield f"rank entry {i} says it is rank {r.rank}"
    yield from _components(names)
    yield from _streams(names)
    yield from _walks(names)
    yield from _flows(names)
    yield from _captures(names)
    for rank in plan.ranks:
        for schedule in rank.schedules:
            yield from _schedule(names, rank.rank, schedule.walk, schedule.instructions)


def _components(n: _Names) -> Iterator[str]:
    for c in n.plan.components:
        bad = next((r for r in c.ranks if not n.rank_ok(r)), None)
        if bad is not None:
            yield f"component {q(c.name)} is placed on rank {bad}, but the plan has ranks 0..{n.ranks - 1}"
        if c.tp < 1:
            yield f"component {q(c.name)} has tp {c.tp}"


def _streams(n: _Names) -> Iterator[str]:
    for s in n.plan.streams:
        for r in (*s.producer_ranks, s.consumer_rank):
            if not n.rank_ok(r):
                yield f"stream {q(s.name)} names rank {r}, but the plan has ranks 0..{n.ranks - 1}"
        if s.consumer_walk is not None and s.consumer_walk not in n.walks:
            yield f"stream {q(s.name)} fires walk {q(s.consumer_walk)}, which the plan does not declare"


def _walks(n: _Names) -> Iterator[str]:
    on_rank = {r.rank: {s.walk for s in r.schedules} for r in n.plan.ranks}
    for w in n.plan.walks:
        for r in (*w.ranks, w.end_rank):
            if not n.rank_ok(r):
                yield f"walk {q(w.name)} names rank {r}, but the plan has ranks 0..{n.ranks - 1}"
                return
        missing = next((r for r in w.ranks if w.name not in on_rank[r]), None)
        if missing is not None:
            yield f"walk {q(w.name)} runs on rank {missing}, which has no schedule for it"
        if w.on is not None and w.on not in n.streams:
            yield f"walk {q(w.name)} is fired by stream {q(w.on)}, which the plan does not declare"
    for r in n.plan.ranks:
        for s in r.schedules:
            if s.walk not in n.walks:
                yield f"rank {r.rank} has a schedule for walk {q(s.walk)}, which the plan does not declare"


def _flows(n: _Names) -> Iterator[str]:
    for f in n.plan.flows:
        eaches = {e.name for e in f.eaches}
        nodes = n.walks | eaches
        where = f"flow {q(f.name)}"
        yield from _exprs(n, where, [f.when] if f.when is not None else [])
        for node, candidates in f.transitions.items():
            if node != "start" and node not in nodes:
                yield f"{where} has transitions from {q(node)}, which is neither a walk nor an each-block"
            for t in candidates:
                if t.target != "done" and t.target not in nodes:
                    yield f"{where} goes from {q(node)} to {q(t.target)}, which is neither a walk nor an each-block"
                yield from _exprs(n, f"{where}, {q(node)} -> {q(t.target)}", [t.when] if t.when else [])
        for e in f.eaches:
            for arm in e.arms:
                bad = next((w for w in arm.walks if w not in n.walks), None)
                if bad is not None:
                    yield f"{where}, each-block {q(e.name)} runs walk {q(bad)}, which the plan does not declare"
                yield from _exprs(n, f"{where}, each-block {q(e.name)}", [arm.when] if arm.when else [])


def _captures(n: _Names) -> Iterator[str]:
    for i, c in enumerate(n.plan.captures):
        comp = n.components.get(c.component)
        where = f"CUDA-graph capture {i}"
        if not n.rank_ok(c.rank):
            yield f"{where} is on rank {c.rank}, but the plan has ranks 0..{n.ranks - 1}"
        elif comp is None:
            yield f"{where} names component {q(c.component)}, which the plan does not declare"
        elif all(e.name != c.entry for e in comp.entries):
            yield f"{where} names entry {q(c.entry)}, which component {q(c.component)} does not have"
        elif c.walk not in n.walks:
            yield f"{where} names walk {q(c.walk)}, which the plan does not declare"


def _component(n: _Names, where: str, name: str, rank: int, entry: str | None = None) -> Iterator[str]:
    comp: ComponentSpec | None = n.components.get(name)
    if comp is None:
        yield f"{where} names component {q(name)}, which the plan does not declare"
    elif rank not in comp.ranks:
        yield f"{where} uses component {q(name)}, which is not on rank {rank}"
    elif entry is not None and all(e.name != entry for e in comp.entries):
        yield f"{where} calls {q(name)}.{q(entry)}, an entry the component does not have"


def _schedule(n: _Names, rank: int, walk: str, instructions: list) -> Iterator[str]:
    loops: list[int] = []
    for i, ins in enumerate(instructions):
        where = f"rank {rank}, walk {q(walk)}, instruction {i} ({type(ins).__name__.upper()})"
        if isinstance(ins, Run):
            yield from _component(n, where, ins.component, rank, ins.entry)
            if not (len(ins.outputs) == len(ins.args) == len(ins.labels) >= 1):
                yield f"{where} has {len(ins.outputs)} outputs, {len(ins.args)} argument lists and {len(ins.labels)} labels"
            if ins.graph_id != -1 and not (0 <= ins.graph_id < len(n.plan.captures)
                                           and n.plan.captures[ins.graph_id].component == ins.component):
                yield f"{where} names CUDA graph {ins.graph_id}, which is not a capture of {q(ins.component)}"
            yield from _exprs(n, where, [a for lane in ins.args for a in lane])
        elif isinstance(ins, (Fork, KvSend, KvRecv)):
            yield from _component(n, where, ins.component, rank)
        elif isinstance(ins, (Push, Pop)) and ins.stream not in n.streams:
            yield f"{where} names stream {q(ins.stream)}, which the plan does not declare"
        elif isinstance(ins, Eval):
            yield from _exprs(n, where, [ins.expr])
        elif isinstance(ins, Loop):
            loops.append(ins.loop_id)
            yield from _exprs(n, where, [ins.bound, *(c.init for c in ins.carries if c.init is not None)])
        elif isinstance(ins, EndLoop) and (not loops or loops.pop() != ins.loop_id):
            yield f"{where} closes loop {ins.loop_id}, which is not the open loop"
        if isinstance(ins, (Send, Recv, KvSend, KvRecv)) and (not n.rank_ok(ins.peer) or ins.peer == rank):
            yield f"{where} names peer rank {ins.peer}, but the plan has ranks 0..{n.ranks - 1} and this is rank {rank}"
    if loops:
        yield f"rank {rank}, walk {q(walk)}: loop {loops[-1]} is never closed"


def _exprs(n: _Names, where: str, exprs: list[Expr]) -> Iterator[str]:
    """Names inside expressions; iterative, so a deeply nested expression cannot overflow the stack."""
    stack = list(exprs)
    while stack:
        e = stack.pop()
        if isinstance(e, EParam) and e.name not in n.params:
            yield f"{where} reads param {q(e.name)}, which the plan does not declare"
        elif isinstance(e, EConst):
            comp = n.components.get(e.component)
            if comp is None or e.name not in comp.consts:
                yield f"{where} reads const {q(e.component)}.{q(e.name)}, which the plan does not declare"
        elif isinstance(e, EReq) and e.field not in REQUEST_FIELDS:
            yield f"{where} reads request field {q(e.field)} (fields: {', '.join(sorted(REQUEST_FIELDS))})"
        elif isinstance(e, EResult) and e.walk not in n.walks:
            yield f"{where} reads the result of walk {q(e.walk)}, which the plan does not declare"
        elif isinstance(e, EUnary):
            stack.append(e.operand)
        elif isinstance(e, EBinary):
            stack += (e.left, e.right)
        elif isinstance(e, EIndex):
            stack += (e.base, e.index)
