"""Pass `flows`: the flow state machines as data (the plan's flow table), and which walks can follow which."""

from __future__ import annotations

from collections import deque

from wgc.check.context import Symbols
from wgc.lang import ast
from wgc.lower.exprs import Resolver, to_expr
from wgc.plan.model import EachArm, EachSpec, FlowSpec, Transition


def flow_names(program: ast.Program) -> list[str]:
    flows = program.of(ast.Flow)
    return [f.name or ("main" if len(flows) == 1 else f"flow{i}") for i, f in enumerate(flows)]


def build_flows(program: ast.Program, symbols: Symbols) -> list[FlowSpec]:
    out = []
    for name, flow in zip(flow_names(program), program.of(ast.Flow)):
        resolve = Resolver(set(symbols.params), set(symbols.components), set(symbols.walks))
        transitions: dict[str, list[Transition]] = {}
        eaches = []
        for item in flow.items:
            if isinstance(item, ast.Chain):
                when = to_expr(item.when, resolve) if item.when is not None else None
                for i, (a, b) in enumerate(zip(item.nodes, item.nodes[1:])):
                    transitions.setdefault(a.name, []).append(Transition(b.name, when if i == 0 else None))
            else:
                part = Resolver(set(symbols.params), set(symbols.components), set(symbols.walks), item.var)
                arms = [EachArm(a.kind, [w.name for w in a.walks], to_expr(a.when, part) if a.when else None)
                        for a in item.arms]
                eaches.append(EachSpec(item.name, arms))
        when = to_expr(flow.when, resolve) if flow.when is not None else None
        out.append(FlowSpec(name, when, transitions, eaches))
    return out


def successors(flows: list[FlowSpec]) -> dict[str, set[str]]:
    """Walk → every walk that can run after it in the same flow (transitively)."""
    edges: dict[str, set[str]] = {}
    for flow in flows:
        for node, outs in flow.transitions.items():
            edges.setdefault(node, set()).update(t.target for t in outs)
        for each in flow.eaches:
            for arm in each.arms:
                chain = [each.name, *arm.walks, each.name]
                for a, b in zip(chain, chain[1:]):
                    edges.setdefault(a, set()).add(b)
    out: dict[str, set[str]] = {}
    for start in edges:
        seen: set[str] = set()
        todo = deque(edges.get(start, ()))
        while todo:
            n = todo.popleft()
            if n not in seen:
                seen.add(n)
                todo.extend(edges.get(n, ()))
        out[start] = seen
    return out
