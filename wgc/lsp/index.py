"""Where every named thing of a program is declared and used: the table behind definition,
references and hover.

A symbol is a key: ("component", c), ("entry", c, e), ("const", c, k), ("label", l), ("walk", w),
("stream", s), ("param", p), ("import", alias), ("each", flow, name) and ("value", walk, v) for the
values of one walk body. Every place one is written is an Occurrence with the span of the name
itself (located with the token list, as most nodes span a whole construct). Values are keyed per
walk, not per loop scope: a name reused in two sibling loops of one walk is one symbol here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wgc.check.types import Ty
from wgc.lang import ast
from wgc.lang.span import Span
from wgc.lsp.tokens import Tokens

Key = tuple[str, ...]


@dataclass(frozen=True)
class Occurrence:
    key: Key
    span: Span  # the name as written
    definition: bool  # a declaration or a binding site (assignment, argument, carry, ...)
    ty: Ty | None = None  # a value's inferred type, where the checker knew it


@dataclass
class Index:
    occurrences: list[Occurrence] = field(default_factory=list)
    decls: dict[Key, ast.Node] = field(default_factory=dict)  # the declaring node of each global symbol

    def at(self, line: int, column: int) -> Occurrence | None:
        """The occurrence under a cursor (on the name, or right after its last character)."""
        for occ in self.occurrences:
            s = occ.span
            if s.line == line and s.column <= column <= s.end_column:
                return occ
        return None

    def definitions(self, key: Key) -> list[Occurrence]:
        return [o for o in self.occurrences if o.key == key and o.definition]

    def references(self, key: Key, include_declaration: bool = True) -> list[Occurrence]:
        return [o for o in self.occurrences if o.key == key and (include_declaration or not o.definition)]


def build_index(program: ast.Program, tokens: Tokens, types: dict[Span, Ty] | None = None) -> Index:
    builder = _Builder(program, tokens, types or {})
    builder.program()
    builder.index.occurrences.sort(key=lambda o: (o.span.line, o.span.column))
    return builder.index


def walk_locals(walk: ast.Walk) -> set[str]:
    """Every name a walk binds: its inputs, assignments, carries, loop indices and yields."""
    names = {a.name for a in walk.args}
    _bound_in(walk.body, names)
    return names


def _bound_in(body: tuple[ast.Stmt, ...], names: set[str]) -> None:
    for s in body:
        if isinstance(s, ast.Assign):
            names.add(s.target)
        elif isinstance(s, ast.Loop):
            names.update(c.name for c in s.carries)
            names.update(y.exposed for y in s.yields)
            if s.index is not None:
                names.add(s.index)
            _bound_in(s.body, names)
        elif isinstance(s, ast.Parallel):
            for b in s.branches:
                _bound_in(b.body, names)


@dataclass
class _WalkScope:
    walk: str
    locals: set[str]


class _Builder:
    def __init__(self, program: ast.Program, tokens: Tokens, types: dict[Span, Ty]) -> None:
        self.prog = program
        self.tok = tokens
        self.types = types
        self.index = Index()
        self.params = {p.name for p in program.of(ast.Param)}
        self.components = {c.name: c for c in program.of(ast.Component)}
        self.walks = {w.name for w in program.of(ast.Walk)}

    def add(self, key: Key, span: Span | None, definition: bool = False, node: ast.Node | None = None,
            ty: Ty | None = None) -> None:
        if span is None:
            return
        self.index.occurrences.append(Occurrence(key, span, definition, ty))
        if node is not None:
            self.index.decls.setdefault(key, node)

    # ---- declarations ---------------------------------------------------------------

    def program(self) -> None:
        for flow_no, decl in enumerate(self.prog.decls):
            if isinstance(decl, ast.Import):
                self.add(("import", decl.alias), self.tok.name(decl.span, decl.alias, last=True), True, decl)
            elif isinstance(decl, ast.Param):
                self.add(("param", decl.name), self.tok.name(decl.span, decl.name, skip=1), True, decl)
            elif isinstance(decl, ast.Component):
                self.component(decl)
            elif isinstance(decl, ast.Stream):
                self.stream(decl)
            elif isinstance(decl, ast.Walk):
                self.walk(decl)
            elif isinstance(decl, ast.Flow):
                self.flow(decl, str(flow_no))

    def component(self, c: ast.Component) -> None:
        self.add(("component", c.name), self.tok.name(c.span, c.name, skip=1), True, c)
        if c.cls:
            self.add(("import", c.cls[0]), self.tok.name(c.span, c.cls[0], skip=3))
        for m in c.members:
            if isinstance(m, ast.Entry):
                self.add(("entry", c.name, m.name), self.tok.name(m.span, m.name), True, m)
            elif isinstance(m, ast.Const):
                self.add(("const", c.name, m.name), self.tok.name(m.span, m.name, skip=1), True, m)
            elif isinstance(m, ast.Labels):
                for label in m.names:
                    self.add(("label", label), self.tok.name(m.span, label, skip=1), True, m)

    def stream(self, s: ast.Stream) -> None:
        self.add(("stream", s.name), self.tok.name(s.span, s.name, skip=1), True, s)
        self.add(("component", s.producer), self.tok.name(s.span, s.producer, after="from"))
        self.add(("component", s.consumer), self.tok.name(s.span, s.consumer, after="to"))

    def walk(self, w: ast.Walk) -> None:
        self.add(("walk", w.name), self.tok.name(w.span, w.name, skip=1), True, w)
        scope = _WalkScope(w.name, walk_locals(w))
        for a in w.args:
            self.value(scope, a.name, self.tok.name(a.span, a.name), True, a.span)
        if w.on is not None:
            self.add(("stream", w.on), self.tok.name(w.on_span, w.on, skip=1))
        self.stmts(scope, w.body)

    # ---- walk bodies -------------------------------------------------------------------

    def value(self, scope: _WalkScope, name: str, span: Span | None, definition: bool, typed_by: Span) -> None:
        self.add(("value", scope.walk, name), span, definition, ty=self.types.get(typed_by))

    def stmts(self, scope: _WalkScope, body: tuple[ast.Stmt, ...]) -> None:
        for s in body:
            if isinstance(s, ast.Assign):
                self.value(scope, s.target, self.tok.name(s.span, s.target), True, s.span)
                self.expr(scope, s.value)
            elif isinstance(s, ast.Send):
                self.expr(scope, s.value)
                self.add(("stream", s.stream), self.tok.name(s.span, s.stream, last=True))
            elif isinstance(s, ast.Emit | ast.Return):
                self.expr(scope, s.value)
            elif isinstance(s, ast.ExprStmt):
                self.expr(scope, s.call)
            elif isinstance(s, ast.Fork):
                self.add(("label", s.target), self.tok.name(s.span, s.target, skip=1))
                self.add(("label", s.source), self.tok.name(s.span, s.source, after="from"))
            elif isinstance(s, ast.Loop):
                self.loop(scope, s)
            elif isinstance(s, ast.Parallel):
                for b in s.branches:
                    self.stmts(scope, b.body)

    def loop(self, scope: _WalkScope, s: ast.Loop) -> None:
        for e in (s.until, s.bound):
            if e is not None:
                self.expr(scope, e)
        if s.index is not None:
            self.value(scope, s.index, self.tok.name(s.span, s.index, after="as"), True, s.span)
        for c in s.carries:
            self.value(scope, c.name, self.tok.name(c.span, c.name, skip=1), True, c.span)
            if c.init is not None:
                self.expr(scope, c.init)
        self.stmts(scope, s.body)
        for y in s.yields:
            self.value(scope, y.name, self.tok.name(y.span, y.name, skip=1), y.alias is None, y.span)
            if y.alias is not None:
                self.value(scope, y.alias, self.tok.name(y.span, y.alias, after="as"), True, y.span)

    def expr(self, scope: _WalkScope | None, e: ast.Expr) -> None:
        """`scope` is None in a flow condition, where names are params and walk results."""
        if isinstance(e, ast.Name):
            self.name(scope, e)
        elif isinstance(e, ast.Attribute):
            self.attribute(scope, e)
        elif isinstance(e, ast.Call):
            self.call(scope, e)
        elif isinstance(e, ast.Recv):
            self.add(("stream", e.stream), self.tok.name(e.span, e.stream, skip=1))
        elif isinstance(e, ast.Index):
            self.expr(scope, e.base)
            self.expr(scope, e.index)
        elif isinstance(e, ast.Unary):
            self.expr(scope, e.operand)
        elif isinstance(e, ast.Binary):
            self.expr(scope, e.left)
            self.expr(scope, e.right)

    def name(self, scope: _WalkScope | None, e: ast.Name) -> None:
        if scope is not None and e.id in scope.locals:
            self.value(scope, e.id, e.span, False, e.span)
        elif e.id in self.params:
            self.add(("param", e.id), e.span)
        elif e.id in self.components:
            self.add(("component", e.id), e.span)

    def attribute(self, scope: _WalkScope | None, e: ast.Attribute) -> None:
        base = e.base
        if isinstance(base, ast.Name) and base.id in self.components and (scope is None or base.id not in scope.locals):
            self.add(("component", base.id), base.span)
            self.add(("const", base.id, e.attr), self.tok.name(e.span, e.attr, last=True))
        elif isinstance(base, ast.Name) and scope is None and base.id in self.walks:
            self.add(("walk", base.id), base.span)  # `decode.result` in a flow condition
        elif not (isinstance(base, ast.Name) and base.id == "request"):
            self.expr(scope, base)

    def call(self, scope: _WalkScope | None, e: ast.Call) -> None:
        func = e.func
        if isinstance(func, ast.Attribute) and isinstance(func.base, ast.Name):
            comp = func.base.id
            self.add(("component", comp), func.base.span)
            self.add(("entry", comp, func.attr), self.tok.name(func.span, func.attr, last=True))
        else:
            self.expr(scope, func)
        for a in e.args:
            self.expr(scope, a)
        for k in e.kwargs:
            if k.name == "cache" and isinstance(k.value, ast.Name):
                self.add(("label", k.value.id), k.value.span)
            else:
                self.expr(scope, k.value)

    # ---- flows ---------------------------------------------------------------------------

    def flow(self, f: ast.Flow, flow_id: str) -> None:
        if f.when is not None:
            self.expr(None, f.when)
        eaches = {item.name for item in f.items if isinstance(item, ast.Each)}
        for item in f.items:
            if isinstance(item, ast.Chain):
                for node in item.nodes:
                    self.flow_node(node, flow_id, eaches)
                if item.when is not None:
                    self.expr(None, item.when)
                continue
            self.add(("each", flow_id, item.name), self.tok.name(item.span, item.name, skip=1), True, item)
            self.expr(None, item.source)
            for arm in item.arms:
                for node in arm.walks:
                    self.flow_node(node, flow_id, set())
                if arm.when is not None:
                    self.expr(None, arm.when)

    def flow_node(self, node: ast.FlowNode, flow_id: str, eaches: set[str]) -> None:
        if node.name in ("start", "done"):
            return
        key = ("each", flow_id, node.name) if node.name in eaches else ("walk", node.name)
        self.add(key, node.span)
