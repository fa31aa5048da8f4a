"""What the reference interpreter needs from a checked program, as plan-shaped data.

Written apart from wgc/lower on purpose: the differential test compares the
reference (built from this) with the simulator (running the lowered plan).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from wgc.check import CheckResult
from wgc.check.context import Symbols
from wgc.check.policies import policy_values
from wgc.lang import ast
from wgc.lower.exprs import Resolver, to_expr
from wgc.plan.model import EachArm, EachSpec, FlowSpec, StreamSpec, Transition, WalkSpec
from wgc.semantics.flows import FlowTable
from wgc.semantics.mock import MockComponent, Value, const_value


@dataclass(frozen=True)
class ProgramFacts:
    program: ast.Program
    symbols: Symbols
    components: dict[str, MockComponent]
    walks: dict[str, WalkSpec]
    streams: list[StreamSpec]
    flows: list[FlowTable]
    producers: dict[str, set[str]]  # stream → walks that send to it
    readers: dict[str, set[str]]  # stream → walks that recv from it
    defaults: dict[str, Value]


def facts(checked: CheckResult) -> ProgramFacts:
    if checked.program is None or checked.symbols is None or not checked.ok:
        raise ValueError("the reference interpreter runs checked programs only")
    program, symbols = checked.program, checked.symbols
    walks = {w.name: WalkSpec(w.name, [a.type.name for a in w.args], w.returns.name if w.returns else None, w.on,
                              [], 0, [a.name for a in w.args])
             for w in program.of(ast.Walk)}
    return ProgramFacts(
        program,
        symbols,
        {c.name: _mock(c) for c in program.of(ast.Component)},
        walks,
        with_consumers([_stream(s) for s in program.of(ast.Stream)], walks),
        [FlowTable(f, walks) for f in _flows(program, symbols)],
        _uses(program, _sends),
        _uses(program, _recvs),
        {p.name: p.default.value if p.default is not None else None for p in program.of(ast.Param)},
    )


def _mock(decl: ast.Component) -> MockComponent:
    """The component as the plan's ComponentSpec would make it (MockComponent.from_spec)."""
    consts = {c.name: const_value(c.name, c.value.value if c.value is not None else None) for c in decl.consts()}
    return MockComponent(decl.name, decl.engine == "kv", decl.labels(), consts)


def _stream(s: ast.Stream) -> StreamSpec:
    return StreamSpec(s.name, "", "", s.policy.name, dict(policy_values(s.policy) or {}), s.at_end or "flush",
                      s.after_end or "stop", s.capacity or 0, [], 0, None)


def _flows(program: ast.Program, symbols: Symbols) -> list[FlowSpec]:
    flows = program.of(ast.Flow)
    out = []
    for i, flow in enumerate(flows):
        name = flow.name or ("main" if len(flows) == 1 else f"flow{i}")
        resolve = Resolver(set(symbols.params), set(symbols.components), set(symbols.walks))
        transitions: dict[str, list[Transition]] = {}
        eaches = []
        for item in flow.items:
            if isinstance(item, ast.Chain):
                for j, (a, b) in enumerate(zip(item.nodes, item.nodes[1:])):
                    when = to_expr(item.when, resolve) if item.when is not None and j == 0 else None
                    transitions.setdefault(a.name, []).append(Transition(b.name, when))
            else:
                part = Resolver(set(symbols.params), set(symbols.components), set(symbols.walks), item.var)
                eaches.append(EachSpec(item.name, [
                    EachArm(a.kind, [w.name for w in a.walks], to_expr(a.when, part) if a.when is not None else None)
                    for a in item.arms]))
        out.append(FlowSpec(name, to_expr(flow.when, resolve) if flow.when is not None else None, transitions, eaches))
    return out


def _statements(stmts: tuple[ast.Stmt, ...]) -> Iterator[ast.Stmt]:
    for s in stmts:
        yield s
        if isinstance(s, ast.Loop):
            yield from _statements(s.body)
        elif isinstance(s, ast.Parallel):
            for b in s.branches:
                yield from _statements(b.body)


def _sends(walk: ast.Walk) -> set[str]:
    return {s.stream for s in _statements(walk.body) if isinstance(s, ast.Send)}


def _recvs(walk: ast.Walk) -> set[str]:
    return {node.stream for s in _statements(walk.body) for node in _exprs(s) if isinstance(node, ast.Recv)}


def _exprs(s: ast.Stmt) -> Iterator[ast.Expr]:
    """Every expression node of one statement (not of nested blocks)."""
    roots: list[ast.Expr] = []
    if isinstance(s, (ast.Assign, ast.Send, ast.Emit, ast.Return)):
        roots.append(s.value)
    elif isinstance(s, ast.ExprStmt):
        roots.append(s.call)
    elif isinstance(s, ast.Loop):
        roots += [e for e in (s.bound, s.until) if e is not None] + [c.init for c in s.carries if c.init is not None]
    while roots:
        e = roots.pop()
        yield e
        for child in ("operand", "left", "right", "base", "index", "value"):
            sub = getattr(e, child, None)
            if isinstance(sub, ast.Node):
                roots.append(sub)
        if isinstance(e, ast.Call):
            roots += list(e.args) + [k.value for k in e.kwargs]


def _uses(program: ast.Program, find: Callable[[ast.Walk], set[str]]) -> dict[str, set[str]]:
    """Stream → walks whose bodies send to it (`_sends`) or receive from it (`_recvs`)."""
    out: dict[str, set[str]] = {}
    for w in program.of(ast.Walk):
        for stream in find(w):
            out.setdefault(stream, set()).add(w.name)
    return out


def with_consumers(streams: list[StreamSpec], walks: dict[str, WalkSpec]) -> list[StreamSpec]:
    """Attach each stream's `on` walk."""
    on = {w.on: w.name for w in walks.values() if w.on}
    return [StreamSpec(s.name, s.item, s.chunk, s.policy, s.policy_args, s.at_end, s.after_end, s.capacity,
                       s.producer_ranks, s.consumer_rank, on.get(s.name)) for s in streams]
