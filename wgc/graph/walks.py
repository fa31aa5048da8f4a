"""A walk as a cluster: one node per call site, edges along the values between them.

Statements and expressions are drawn through dispatch tables. A loop is drawn as a nested
cluster; its carried values are found by trial passes over the body (taken back afterwards)
until they settle, so a value the next iteration reads comes back as a BACK edge. Parallel
branches each start from the scope before the block and become side-by-side clusters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wgc.check.context import Symbols
from wgc.graph.dataflow import Origin, Read, Scope, SendSite, Sink, origins, settled
from wgc.graph.labels import arg_lines, call_line, loop_lines, walk_lines
from wgc.graph.model import (
    BRANCH,
    CALL,
    EMIT,
    FORK,
    INPUT,
    LOOP,
    PARALLEL,
    RECV,
    RETURN,
    SEND,
    WALK,
    GCluster,
    GNode,
    Ids,
)
from wgc.graph.ranks import Painter
from wgc.lang import ast

CACHE_KWARG = "cache"


class WalkDrawer:
    def __init__(self, walk: ast.Walk, symbols: Symbols, ids: Ids, sink: Sink, painter: Painter) -> None:
        self.walk = walk
        self.symbols = symbols
        self.ids = ids
        self.sink = sink
        self.painter = painter
        self.scope: Scope = {}
        self.branch: str | None = None  # the innermost `parallel` branch being drawn

    def draw(self) -> GCluster:
        box = GCluster(self.ids.cluster(), WALK, walk_lines(self.walk))
        for arg in self.walk.args:
            self.scope[arg.name] = (Origin(self._node(box, INPUT, arg_lines(arg))),)
        if self.walk.on is not None and self.walk.args:  # a stream-fired walk: its chunk arrives here
            self.sink.receiver(self.walk.on, self.scope[self.walk.args[0].name][0].node)
        self.block(self.walk.body, box)
        return box

    def block(self, body: tuple[ast.Stmt, ...], box: GCluster) -> None:
        for stmt in body:
            _STATEMENTS[type(stmt)](self, stmt, box)

    def _node(self, box: GCluster, kind: str, lines: tuple[str, ...], fill: str | None = None) -> str:
        node = GNode(self.ids.node(), kind, lines, fill)
        box.nodes.append(node)
        return node.id

    def _sink_node(self, box: GCluster, kind: str, lines: tuple[str, ...], value: ast.Expr) -> None:
        reads = self.reads(value, box)
        self.sink.reads(self._node(box, kind, lines), reads)

    # ---- expressions: the values an expression reads, drawing the calls in it ----------

    def reads(self, e: ast.Expr, box: GCluster) -> list[Read]:
        return _EXPRESSIONS[type(e)](self, e, box)

    def _name(self, e: ast.Name, box: GCluster) -> list[Read]:
        return [Read(o, e.id) for o in self.scope.get(e.id, ())]

    def _call(self, e: ast.Call, box: GCluster) -> list[Read]:
        component, entry = _callee(e.func)
        label = next((k.value.id for k in e.kwargs if k.name == CACHE_KWARG and isinstance(k.value, ast.Name)), None)
        reads = [r for a in e.args for r in self.reads(a, box)]
        reads += [r for k in e.kwargs if k.name != CACHE_KWARG for r in self.reads(k.value, box)]
        fill, extra = self.painter.paint(component, self.walk.name, self.branch)
        node = self._node(box, CALL, (call_line(component, entry, label), *extra), fill)
        self.sink.reads(node, reads)
        return [Read(Origin(node), None)]

    def _recv(self, e: ast.Recv, box: GCluster) -> list[Read]:
        node = self._node(box, RECV, (f"recv {e.stream}",))
        self.sink.receiver(e.stream, node)
        return [Read(Origin(node), None)]

    # ---- statements ----------------------------------------------------------------------

    def _assign(self, s: ast.Assign, box: GCluster) -> None:
        self.scope[s.target] = origins(self.reads(s.value, box))

    def _send(self, s: ast.Send, box: GCluster) -> None:
        sources = tuple(o.node for o in origins(self.reads(s.value, box)))
        if not sources:  # a literal or a param: the stream starts at the send itself
            sources = (self._node(box, SEND, (f"send -> {s.stream}",)),)
        self.sink.sends.append(SendSite(s.stream, sources))

    def _fork(self, s: ast.Fork, box: GCluster) -> None:
        component = self.symbols.labels[s.target][0] if s.target in self.symbols.labels else "?"
        fill, extra = self.painter.paint(component, self.walk.name, self.branch)
        self._node(box, FORK, (call_line(component, "fork", f"{s.target} <- {s.source}"), *extra), fill)

    def _loop(self, lp: ast.Loop, box: GCluster) -> None:
        inner = GCluster(self.ids.cluster(), LOOP, loop_lines(lp))
        init: Scope = {}
        for c in lp.carries:
            init[c.name] = origins(self.reads(c.init, box)) if c.init is not None else settled(self.scope.get(c.name, ()))
        if lp.index is not None:
            init[lp.index] = ()  # the iteration index comes from no node
        outer = dict(self.scope)
        entry = init
        for _ in range(len(lp.carries) + 2):  # each trial can only add nodes; a carry settles in one pass
            ends = self._trial(lp, {**outer, **entry})
            again = {name: _with_back(init[name], ends.get(name, ())) for name in init}
            if again == entry:
                break
            entry = again
        self.scope = {**outer, **entry}
        self.block(lp.body, inner)
        if lp.until is not None:
            self.reads(lp.until, inner)
        end, self.scope = self.scope, outer
        for y in lp.yields:
            self.scope[y.exposed] = settled(end.get(y.name, ()))
        box.children.append(inner)

    def _trial(self, lp: ast.Loop, scope: Scope) -> Scope:
        """The values at the end of one pass over the body, drawn into a throwaway cluster."""
        mark = self.ids.mark()
        trial = WalkDrawer(self.walk, self.symbols, self.ids, Sink(), self.painter)
        trial.scope, trial.branch = dict(scope), self.branch
        trial.block(lp.body, GCluster("", LOOP, ()))
        self.ids.reset(mark)
        return trial.scope

    def _parallel(self, p: ast.Parallel, box: GCluster) -> None:
        inner = GCluster(self.ids.cluster(), PARALLEL, ("parallel",))
        before, outer_branch = self.scope, self.branch
        after = dict(before)
        for b in p.branches:
            self.scope, self.branch = dict(before), b.name
            lane = GCluster(self.ids.cluster(), BRANCH, (f"branch {b.name}",))
            self.block(b.body, lane)
            after.update({k: v for k, v in self.scope.items() if before.get(k) != v})
            inner.children.append(lane)
        self.scope, self.branch = after, outer_branch
        box.children.append(inner)


def _callee(func: ast.Expr) -> tuple[str, str]:
    """`comp.entry` as (comp, entry); anything else (rejected by the checker) as its text."""
    if isinstance(func, ast.Attribute) and isinstance(func.base, ast.Name):
        return func.base.id, func.attr
    return "?", "?"


def _with_back(init: tuple[Origin, ...], end: tuple[Origin, ...]) -> tuple[Origin, ...]:
    """A carried value on entry to the body: its initial nodes, plus the previous iteration's."""
    first = {o.node for o in init}
    return init + tuple(dict.fromkeys(Origin(o.node, back=True) for o in end if o.node not in first))


def _nothing(drawer: WalkDrawer, e: Any, box: GCluster) -> list[Read]:
    return []


def _parts(*fields: str) -> Callable[[WalkDrawer, Any, GCluster], list[Read]]:
    """An expression that reads what its sub-expressions read."""
    return lambda d, e, box: [r for f in fields for r in d.reads(getattr(e, f), box)]


_EXPRESSIONS: dict[type, Callable[[WalkDrawer, Any, GCluster], list[Read]]] = {
    ast.Name: WalkDrawer._name,
    ast.IntLit: _nothing,
    ast.FloatLit: _nothing,
    ast.SizeLit: _nothing,
    ast.StrLit: _nothing,
    ast.BoolLit: _nothing,
    ast.Attribute: _parts("base"),  # `llm.eos`, `request.task`: no node behind the base
    ast.Index: _parts("base", "index"),
    ast.Unary: _parts("operand"),
    ast.Binary: _parts("left", "right"),
    ast.Call: WalkDrawer._call,
    ast.Recv: WalkDrawer._recv,
}

_STATEMENTS: dict[type, Callable[[WalkDrawer, Any, GCluster], None]] = {
    ast.Assign: WalkDrawer._assign,
    ast.ExprStmt: lambda d, s, box: d.reads(s.call, box),
    ast.Send: WalkDrawer._send,
    ast.Emit: lambda d, s, box: d._sink_node(box, EMIT, (f"emit {s.modality}",), s.value),
    ast.Return: lambda d, s, box: d._sink_node(box, RETURN, ("return",), s.value),
    ast.Fork: WalkDrawer._fork,
    ast.Loop: WalkDrawer._loop,
    ast.Parallel: WalkDrawer._parallel,
}
