"""Flows: transitions, each-blocks, conditions, reachability from `start` and of `done`, input binding."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from wgc.check.context import Context
from wgc.check.exprs import UNKNOWN, ExprChecker
from wgc.check.types import STR, Subst, Ty, unify
from wgc.diag.diagnostic import Note
from wgc.diag.sink import did_you_mean
from wgc.lang import ast
from wgc.lang.span import Span

# Input part kind → value kinds a walk taking that part may declare.
PART_KINDS: dict[str, frozenset[str]] = {
    "text": frozenset({"text", "token"}),
    "image": frozenset({"image"}),
    "audio": frozenset({"audio"}),
    "video": frozenset({"video", "tensor"}),
    "_": frozenset(),  # any
}


@dataclass
class FlowGraph:
    edges: dict[str, list[str]] = field(default_factory=dict)
    first_seen: dict[str, Span] = field(default_factory=dict)
    broken: bool = False  # a transition names an unknown walk

    def add(self, a: str, b: str, span: Span) -> None:
        self.edges.setdefault(a, []).append(b)
        self.edges.setdefault(b, [])
        self.first_seen.setdefault(b, span)

    def reachable(self, root: str, reverse: bool = False) -> set[str]:
        adj = self.edges
        if reverse:
            adj = {}
            for a, outs in self.edges.items():
                for b in outs:
                    adj.setdefault(b, []).append(a)
        seen, todo = {root}, deque([root])
        while todo:
            for nxt in adj.get(todo.popleft(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen


class ConditionChecker(ExprChecker):
    """Conditions see request fields, params, walk results and, in an each-arm, the part."""

    def __init__(self, ctx: Context, part: str | None = None) -> None:
        super().__init__(ctx)
        self.part = part

    def name(self, e: ast.Name) -> Ty:
        ty = self.param(e)
        if ty is not None:
            return ty
        if e.id == self.part:
            return Ty("part")
        if e.id in self.ctx.symbols.walks:
            self.ctx.error("E011", f"`{e.id}` is a walk; its value is `{e.id}.result`", e.span)
            return UNKNOWN
        self.ctx.error("E004", f"unknown name `{e.id}` in a flow condition", e.span,
                       did_you_mean(e.id, self.ctx.symbols.params) or
                       ("conditions read request fields, params and walk results (`WALK.result`)",))
        return UNKNOWN

    def attribute_of_name(self, e: ast.Attribute, base: ast.Name) -> Ty | None:
        if base.id == self.part:
            if e.attr != "kind":
                self.ctx.error("E004", f"a part has no field `{e.attr}`", e.span, ("parts have `.kind`",))
                return UNKNOWN
            return STR
        walk = self.ctx.symbols.walks.get(base.id)
        if walk is None:
            return None
        if e.attr != "result":
            self.ctx.error("E004", f"walk `{base.id}` has no field `{e.attr}`", e.span, ("a walk's value is `.result`",))
            return UNKNOWN
        if walk.returns is None:
            self.ctx.error("E032", f"walk `{base.id}` returns nothing, so it has no result to test", e.span,
                           notes=(Note("declared here", walk.decl.span),))
            return UNKNOWN
        return walk.returns


def check_flows(ctx: Context) -> None:
    reached: set[str] = set()
    for flow in ctx.program.of(ast.Flow):
        reached |= _check_flow(ctx, flow)
    for info in ctx.symbols.walks.values():
        w = info.decl
        if w.name in ("start", "done"):
            ctx.error("E022", f"a walk named `{w.name}` can never run: in a flow, `{w.name}` is the flow's "
                      f"{'first' if w.name == 'start' else 'final'} state", w.span, ("rename the walk",))
        elif w.on is None and w.name not in reached:
            ctx.error("E022", f"walk `{w.name}` is unreachable: no flow leads to it from `start`", w.span,
                      ("add it to a flow, e.g. `start -> " + w.name + " -> done`",))


def _check_flow(ctx: Context, flow: ast.Flow) -> set[str]:
    if flow.when is not None:
        ConditionChecker(ctx).condition(flow.when, "a flow's `when` condition")
    graph = FlowGraph()
    eaches: dict[str, ast.Each] = {}
    for each in (item for item in flow.items if isinstance(item, ast.Each)):
        if each.name in eaches:
            ctx.error("E003", f"two each-blocks are named `{each.name}`", each.span,
                      notes=(Note("first each-block", eaches[each.name].span),))
        elif each.name in ctx.symbols.walks:
            ctx.error("E003", f"each-block `{each.name}` has the name of a walk", each.span)
        eaches.setdefault(each.name, each)
    for item in flow.items:
        if isinstance(item, ast.Chain):
            _chain(ctx, item, graph, eaches)
        else:
            _each(ctx, item, graph, eaches)
    label = f"flow `{flow.name}`" if flow.name else "the flow"
    if "start" not in graph.edges:
        ctx.error("E023", f"{label} has no `start`", flow.span, ("begin it with `start -> WALK`",))
        return set()
    forward = graph.reachable("start")
    if graph.broken:
        return forward  # an unknown walk is reported already; its gap would only add false dead ends
    finishing = graph.reachable("done", reverse=True) if "done" in graph.edges else set()
    for node in sorted(forward - finishing - {"done"}):
        span = graph.first_seen.get(node, flow.span)
        ctx.error("E023", f"{label} cannot reach `done` after `{node}`", span,
                  (f"add a transition such as `{node} -> done`",))
    return forward


def _node(ctx: Context, n: ast.FlowNode, eaches: dict[str, ast.Each]) -> bool:
    if n.name in ("start", "done") or n.name in eaches or n.name in ctx.symbols.walks:
        return True
    ctx.error("E007", f"unknown walk `{n.name}`", n.span, did_you_mean(n.name, [*ctx.symbols.walks, *eaches]))
    return False


def _chain(ctx: Context, chain: ast.Chain, graph: FlowGraph, eaches: dict[str, ast.Each]) -> None:
    if chain.when is not None:
        ConditionChecker(ctx).condition(chain.when, "a transition's `when` condition")
    nodes = chain.nodes
    known = [_node(ctx, n, eaches) for n in nodes]
    graph.broken |= not all(known)
    for i, (a, b) in enumerate(zip(nodes, nodes[1:])):
        if a.name == "done":
            ctx.error("E023", "`done` ends the flow; nothing can follow it", a.span)
        elif b.name == "start":
            ctx.error("E023", "`start` cannot be the target of a transition", b.span)
        elif known[i] and known[i + 1]:
            graph.add(a.name, b.name, b.span)
            _bind(ctx, a.name, b)
    if nodes[0].name == "start":
        graph.edges.setdefault("start", [])


def _each(ctx: Context, each: ast.Each, graph: FlowGraph, eaches: dict[str, ast.Each]) -> None:
    source = ConditionChecker(ctx).check(each.source)
    if source.kind not in ("parts", "unknown"):
        ctx.error("E011", f"each-blocks iterate over `request.parts`, not {source}", each.source.span)
    graph.edges.setdefault(each.name, [])
    for arm in each.arms:
        if arm.kind not in PART_KINDS:
            ctx.error("E039", f"unknown part kind `{arm.kind}`", arm.span,
                      did_you_mean(arm.kind, PART_KINDS) or ("kinds: text, image, audio, video, _",))
        if arm.when is not None:
            ConditionChecker(ctx, part=each.var).condition(arm.when, "an arm's `when` condition")
        if not all([_node(ctx, n, eaches) for n in arm.walks]):
            graph.broken = True
            continue
        previous = each.name
        for i, n in enumerate(arm.walks):
            graph.add(previous, n.name, n.span)
            if i == 0:
                _bind_part(ctx, arm.kind, n)
            else:
                _bind(ctx, previous, n)
            previous = n.name
        graph.add(previous, each.name, arm.span)


def _bind(ctx: Context, source: str, target: ast.FlowNode) -> None:
    """A walk with inputs that follows another walk takes that walk's result."""
    after = ctx.symbols.walks.get(target.name)
    before = ctx.symbols.walks.get(source)
    if after is None or before is None or not after.args:
        return  # after start or an each-block, inputs come from the request by name
    if len(after.args) != 1 or before.returns is None:
        gives = "returns nothing" if before.returns is None else f"returns one value ({before.returns})"
        ctx.error("E031", f"walk `{target.name}` takes {len(after.args)} input(s) but follows `{source}`, which {gives}",
                  target.span, notes=(Note(f"`{target.name}` is declared here", after.decl.span),))
        return
    problem = unify(after.args[0], before.returns, Subst(), target.name)
    if problem is not None:
        ctx.error("E031", f"walk `{target.name}` takes {after.args[0]}, but `{source}` returns {before.returns}",
                  target.span)


def _bind_part(ctx: Context, kind: str, target: ast.FlowNode) -> None:
    walk = ctx.symbols.walks.get(target.name)
    if walk is None or kind not in PART_KINDS:
        return
    if len(walk.args) != 1:
        ctx.error("E031", f"walk `{target.name}` runs per input part, so it takes exactly one input (the part); "
                  f"it declares {len(walk.args)}", target.span)
        return
    accepted = PART_KINDS[kind]
    if accepted and walk.args[0].kind not in accepted | {"unknown"}:
        ctx.error("E031", f"walk `{target.name}` takes {walk.args[0]}, which cannot hold a {kind} part", target.span,
                  ("a " + kind + " part fits " + " or ".join(sorted(accepted)),))
